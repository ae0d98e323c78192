import type { TaskRegistrar } from "../src/index.js";

/** A quick task: records that the scheduler is alive and how late the slot started. */
export function registerHeartbeat(scheduler: TaskRegistrar): void {
  scheduler.register({
    name: "heartbeat",
    description: "Logs that the service is alive, with the start lateness of the slot",
    handler: async (context) => {
      const latenessMs = context.startedAt.getTime() - context.scheduledAt.getTime();
      context.logger.info({ latenessMs }, "heartbeat: alive");
    },
  });
}

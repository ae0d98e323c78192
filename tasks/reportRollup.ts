import { setTimeout as sleep } from "node:timers/promises";
import type { TaskRegistrar } from "../src/index.js";

const STEPS = 15;
const STEP_MS = 5_000;

/**
 * A long task (about 75 s, longer than a minute): it works in steps and stops between steps
 * when its signal fires, so a shutdown past the drain timeout leaves no half-written step.
 */
export function registerReportRollup(scheduler: TaskRegistrar): void {
  scheduler.register({
    name: "reportRollup",
    description: "Rolls up a report in 15 steps of 5 s",
    handler: async (context) => {
      for (let step = 1; step <= STEPS; step++) {
        context.signal.throwIfAborted();
        await sleep(STEP_MS, undefined, { signal: context.signal });
        context.logger.debug({ step, of: STEPS }, "reportRollup: step done");
      }
      context.logger.info({ steps: STEPS }, "reportRollup: report rolled up");
    },
  });
}

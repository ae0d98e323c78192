import type { TaskRegistrar } from "../src/index.js";
import { registerHeartbeat } from "./heartbeat.js";
import { registerReportRollup } from "./reportRollup.js";

/** Registers every task of the reference service. Add one line per task module. */
export function registerTasks(scheduler: TaskRegistrar): void {
  registerHeartbeat(scheduler);
  registerReportRollup(scheduler);
}

import type { SchedulerEventSource } from "../scheduler/eventSubscriptions.js";
import type { Scheduler } from "../scheduler/scheduler.js";

/** What the admin server uses of a Scheduler: its events, its read-mostly API and runNow(). */
export type AdminScheduler = SchedulerEventSource &
  Pick<
    Scheduler,
    | "status"
    | "taskStatus"
    | "runs"
    | "runHistory"
    | "runDetail"
    | "timeline"
    | "runNow"
    | "resume"
    | "readiness"
    | "desiredState"
    | "lastReconcile"
    | "auditTrail"
    | "chains"
    | "fleet"
    | "slotActions"
    | "shards"
    | "shardProgress"
  >;

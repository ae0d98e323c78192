import type { UpstreamRun } from "../core/dependencies/spec.js";
import type { Logger } from "../core/logger.js";
import type { PreviousRun, RetryPolicy } from "../core/runTypes.js";

/** What a handler receives for one run. */
export interface TaskContext {
  /** The registered task name. */
  readonly taskName: string;
  /** The slot this run is for: the scheduled time Agenda picked the job up for (not the start time). */
  readonly scheduledAt: Date;
  /** When the framework started the handler. */
  readonly startedAt: Date;
  /** 1 for a scheduled run; counts up for retries of the same slot. */
  readonly attempt: number;
  /** Fires when the run must stop: its timeout, a lost lock, or shutdown past the drain timeout. */
  readonly signal: AbortSignal;
  /** `taskName@scheduledAt` (ISO): the same for a re-run of the same slot; use it as an idempotency key. */
  readonly runKey: string;
  /**
   * Set when this run repeats an earlier run of the same slot: one that started and never finished
   * (its instance died or lost the lock), or one an operator asked to re-run (`trigger` "rerun").
   */
  readonly rerunOf: PreviousRun | undefined;
  /**
   * What started this run: its slot (`schedule`), run now (`manual`), an operator's re-run of this
   * slot (`rerun`) or a backfill of a range (`backfill`); `runKey` is the slot's in every case
   * (docs/operations.md, "Re-run a slot", "Backfill").
   */
  readonly trigger: "schedule" | "manual" | "rerun" | "backfill";
  /** A child logger bound to this task and run. */
  readonly logger: Logger;
  /** The instance that runs this slot. */
  readonly instanceId: string;
  /**
   * For a task that runs after others (docs/dependencies.md): the upstream runs of this slot it
   * waited for (name, run key, outcome). Empty for a task with its own cron and for a manual run.
   */
  readonly upstreams: readonly UpstreamRun[];
}

export type TaskHandler = (context: TaskContext) => Promise<void> | void;

/** What task code passes to `scheduler.register()`. */
export interface TaskRegistration {
  /** Unique name; the config center refers to the task by it. ASCII letters, digits, `.`, `_`, `-`, `:`, 1-200 chars. */
  name: string;
  handler: TaskHandler;
  /** Shown in logs and listings. */
  description?: string;
  /** After this many ms the run's signal fires and the run is recorded as failed ("timed out"). */
  timeoutMs?: number;
  /** Retries of a failed run within the same slot, with exponential backoff (Agenda's strategy). */
  retry?: RetryPolicy;
}

/** What task modules need of the scheduler: a place to register (a Scheduler is one). */
export interface TaskRegistrar {
  register(task: TaskRegistration): void;
}

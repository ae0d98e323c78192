import type { UpstreamRun } from "../core/dependencies/spec.js";
import type { Logger } from "../core/logger.js";
import type { PreviousRun, RetryPolicy } from "../core/runTypes.js";
import type { IsolationMode } from "../isolation/isolationSpec.js";

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
  /** Set when this run repeats one that started and never finished (its instance died or lost the lock). */
  readonly rerunOf: PreviousRun | undefined;
  /** A child logger bound to this task and run. */
  readonly logger: Logger;
  /** The instance that runs this slot. */
  readonly instanceId: string;
  /**
   * For a task that runs after others (docs/dependencies.md): the upstream runs of this slot it
   * waited for (name, run key, outcome). Empty for a task with its own cron and for a manual run.
   */
  readonly upstreams: readonly UpstreamRun[];
  /** `schedule`, or `manual` for a run asked through runNow() or the admin API. */
  readonly trigger: "schedule" | "manual";
  /**
   * The secrets the registration declared (`secrets: [...]`), read for this run (docs/isolation.md,
   * "Secrets"): only this task's, by name. Empty when it declared none.
   */
  readonly secrets: Readonly<Record<string, string>>;
}

export type TaskHandler = (context: TaskContext) => Promise<void> | void;

/** What task code passes to `scheduler.register()`. */
export interface TaskRegistration {
  /** Unique name; the config center refers to the task by it. ASCII letters, digits, `.`, `_`, `-`, `:`, 1-200 chars. */
  name: string;
  /** The handler, run on the scheduler's thread. A task gives this or `module`. */
  handler?: TaskHandler;
  /**
   * Where the handler runs (docs/isolation.md): `none` (default) on the scheduler's thread;
   * `worker` in a worker thread, `process` in a child process, each with a heap limit and ended
   * at `timeoutMs` plus the scheduler's timeoutGraceMs. `worker` and `process` need `module`.
   */
  isolation?: IsolationMode;
  /**
   * The module that exports the handler: `new URL("./report.mjs", import.meta.url)`, a file URL or
   * an absolute path. Its export `exportName`, else `default`, else `handler`, is called with the
   * context; what it returns (JSON, up to 16 KB) is kept in the run record's log.
   */
  module?: URL | string;
  /** The module's export to call; default `default`, then `handler`. */
  exportName?: string;
  /** The heap limit of a `worker` or `process` handler, in MB (default 256). */
  memoryLimitMb?: number;
  /** Names of the secrets the handler gets in `ctx.secrets` (and, isolated, as its whole `process.env`). */
  secrets?: readonly string[];
  /** Shown in logs and listings. */
  description?: string;
  /**
   * After this many ms the run's signal fires and the run is recorded as failed ("timed out"). An
   * isolated handler still running the scheduler's timeoutGraceMs later is ended ("timeout (terminated)").
   */
  timeoutMs?: number;
  /** Retries of a failed run within the same slot, with exponential backoff (Agenda's strategy). */
  retry?: RetryPolicy;
}

/** What task modules need of the scheduler: a place to register (a Scheduler is one). */
export interface TaskRegistrar {
  register(task: TaskRegistration): void;
}

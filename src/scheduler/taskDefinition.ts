import type { UpstreamRun } from "../core/dependencies/spec.js";
import type { Logger } from "../core/logger.js";
import type { PreviousRun, RetryPolicy } from "../core/runTypes.js";
import type { IsolationMode } from "../isolation/isolationSpec.js";
import type { ShardResult } from "../sharding/slotCoordinator.js";

/** Which shard a handler runs (docs/sharding.md): set only for a sharded task's shards. */
export interface ShardInfo {
  /** 0 to count - 1. */
  readonly index: number;
  readonly count: number;
  /** The entry's `shardParameters` value for this shard, or the map's item; null when none. */
  readonly parameter: unknown;
}

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
  /**
   * The secrets the registration declared (`secrets: [...]`), read for this run (docs/isolation.md,
   * "Secrets"): only this task's, by name. Empty when it declared none.
   */
  readonly secrets: Readonly<Record<string, string>>;
  /**
   * For a sharded task (docs/sharding.md): the shard this call runs. The handler then runs once per
   * shard, and what it returns (small JSON, at most 16 KB) is the shard's value for the reduce.
   */
  readonly shard?: ShardInfo;
}

/** A task's handler; a sharded task's may return its shard's value (JSON), other tasks' return value is ignored. */
export type TaskHandler = (context: TaskContext) => Promise<unknown> | unknown;

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
  /**
   * Retries of a failed run within the same slot, with exponential backoff (Agenda's strategy). For
   * a sharded task, this and timeoutMs apply to each shard (docs/sharding.md).
   */
  retry?: RetryPolicy;
  /**
   * A dynamic sharded task (docs/sharding.md): returns this slot's shard items (one shard each,
   * given as `ctx.shard.parameter`). Called once per slot; the items are stored with the slot, so a
   * crash does not map again. A task with a map is sharded whatever its config entry says.
   */
  map?: (context: TaskContext) => Promise<readonly unknown[]> | readonly unknown[];
  /**
   * Runs once per sharded slot after every shard has ended, with each shard's outcome and value.
   * Its failure fails the slot. With a map or with `shards:` in the config entry.
   */
  reduce?: (context: TaskContext, results: readonly ShardResult[]) => Promise<unknown> | unknown;
}

/** What task modules need of the scheduler: a place to register (a Scheduler is one). */
export interface TaskRegistrar {
  register(task: TaskRegistration): void;
}

import type { Pool } from "pg";
import type { Clock } from "../core/clock.js";
import type { DependencySpec, SkipKind, UpstreamRun } from "../core/dependencies/index.js";
import type { Logger } from "../core/logger.js";
import type { Calendar } from "../core/policies/calendar.js";
import type { CatchUpPolicy } from "../core/policies/catchUp.js";
import type { OverlapPolicy } from "../core/policies/overlap.js";
import type { PauseMark } from "../core/policies/pauseOnFailure.js";
import type { AttemptOutcome, PreviousRun, RetryPolicy, RunOutcome } from "../core/runTypes.js";
import type { RunJournal } from "./runJournal.js";
import type { RunLogMeta } from "./runLogMeta.js";

export interface EngineOptions {
  pool: Pool;
  instanceId: string;
  /**
   * The engine's one clock (src/core/clock.ts): the time its decisions and records read (the
   * claim, a run's slot and start, the lock times, the takeover hold, the run log's rows) and the
   * timers that wake its loops; the system clock by default. engine/ reads no other.
   */
  clock?: Clock;
  processEveryMs: number;
  lockLifetimeMs: number;
  /** Runs in progress at once on this instance, all tasks together (Agenda's maxConcurrency). */
  maxConcurrency?: number;
  /** After a timeout, how long a handler that ignores its signal keeps the lock before it is abandoned. */
  timeoutGraceMs?: number;
  /** How often the database is probed for the outage log. */
  healthProbeMs?: number;
  /** How long past its slot an enabled job may go without starting before it is reported missed. */
  missedSlotGraceMs?: number;
  /** How often the missed-slot check runs; 0 turns it off. */
  missedSlotCheckMs?: number;
  /** How often the other instances' liveness is checked (src/engine/liveness.ts); 0 turns liveness off. */
  livenessCheckMs?: number;
  /**
   * true (default): create or upgrade the schema at start-up when it is not current. false: never
   * change it; start-up fails (SCHEMA_NOT_CURRENT) unless `cronwarden migrate` brought it current.
   */
  migrate?: boolean;
  /** An event-loop stall this long or longer is logged and counted (default 2 s; 0 turns it off). */
  stallWarnMs?: number;
  /** The deployment's namespace: the pause-all switch it obeys (src/engine/pauseGate.ts); default "default". */
  namespace?: string;
  /** The host and version this instance shows in GET /instances (src/engine/sql/instances.ts). */
  describe?: { host: string; version: string };
  /**
   * Task dependencies (docs/dependencies.md), built once with the engine's wake: the coordinator of
   * src/dependencies/coordinator.ts. Without it no task may run after another.
   */
  dependencies?: (engine: { wake(rows: DownstreamWake[]): void }) => TaskDependencies;
  /** The run log's partitions' width in hours (src/engine/sql/runLogPartitions.ts); default 24. */
  runLogPartitionHours?: number;
  logger: Logger;
  hooks?: EngineHooks;
  /** Called when the missed-slot check finds a job without a next run: a reconcile re-times it. */
  repairLostNextRun?: () => Promise<void>;
}

/**
 * What started a run: its slot (`schedule`), run now (`manual`), an operator's re-run of one slot
 * under its own identity (`rerun`), or a backfill of a range of slots (`backfill`; docs/operations.md).
 */
export type RunTrigger = "schedule" | "manual" | "rerun" | "backfill";

/** A stored trigger as the engine knows it: anything else (rows from older versions) is `schedule`. */
export function runTriggerOf(value: unknown): RunTrigger {
  return value === "manual" || value === "rerun" || value === "backfill" ? value : "schedule";
}

/** What the engine hands the scheduler for one attempt of one slot. */
export interface EngineRun {
  taskName: string;
  jobId: string;
  scheduledAt: Date;
  startedAt: Date;
  /** 1, then 2, 3... for the retries of the same slot. */
  attempt: number;
  trigger: RunTrigger;
  /** Who asked for a manual run: the admin token's name, or what the caller of runNow() gave. */
  requestedBy?: string | undefined;
  signal: AbortSignal;
  /** Set when the previous run of this job started and never finished (its instance died). */
  rerunOf: PreviousRun | undefined;
  /** Collects what the handler logs through ctx.logger during this attempt, for the run record. */
  journal?: RunJournal;
  /** A downstream's run (docs/dependencies.md): the upstream runs it waited for. */
  upstreams?: UpstreamRun[] | undefined;
  /** A manual run asked with its downstreams: they follow this run's slot. */
  withDownstream?: boolean | undefined;
}

export interface RunResult {
  /**
   * `interrupted`: cut off at shutdown and handed to another instance (not a failure). `lock-lost`:
   * another instance took the lock while it ran, and re-runs the slot.
   */
  outcome: AttemptOutcome;
  durationMs: number;
  error?: Error;
  /** False when the retry policy schedules another attempt of the same slot. */
  final: boolean;
}

export interface MissedSlot {
  taskName: string;
  scheduledAt: Date | null;
  reason: string;
}

/** Where the engine reports what happens; the scheduler turns these into events and logs. */
export interface EngineHooks {
  /** A job was locked for a slot, possibly ahead of it; its run starts at the slot. */
  slotLocked?(taskName: string, scheduledAt: Date): void;
  runStarted?(run: EngineRun): void;
  runFinished?(run: EngineRun, result: RunResult): void;
  retryScheduled?(run: EngineRun, error: Error, delayMs: number): void;
  lockRenewed?(taskName: string): void;
  lockLost?(run: EngineRun, reason: string): void;
  /** The event loop was blocked for at least EngineOptions.stallWarnMs (once per stall, when it ended). */
  eventLoopStalled?(stall: { durationMs: number; runningTasks: string[] }): void;
  abandoned?(run: EngineRun, reason: string): void;
  missedSlot?(missed: MissedSlot): void;
  /** Slots were skipped by the task's catchUp or overlap policy (one call per decision). */
  slotsSkipped?(skipped: SkippedSlots): void;
  /** A task paused itself after its pauseOnFailure failed slots in a row (once per pause). */
  taskPaused?(paused: TaskPaused): void;
  /** A downstream started waiting for its upstreams' slot. */
  dependencyWaitOpened?(taskName: string, scheduledAt: Date): void;
  /** A downstream's slot was decided: its run queued, or skipped with the reason. */
  dependencyDecided?(decision: DependencyDecisionEvent): void;
}

/** A pause by failure (src/core/policies/pauseOnFailure.ts), as the slot's end saved it. */
export interface TaskPaused extends PauseMark {
  taskName: string;
}

/** One policy decision's skipped slots (src/core/policies/catchUp.ts, overlap.ts). */
export interface SkippedSlots {
  taskName: string;
  /** Which policy skipped them. */
  policy: "catchUp" | "overlap";
  /** How many; `atLeast` when there were too many to count. */
  count: number;
  atLeast: boolean;
  first: Date;
  last: Date;
  /** The missed slot that runs instead, if any. */
  runs: Date | null;
  reason: string;
}

export interface DependencyDecisionEvent {
  taskName: string;
  scheduledAt: Date;
  decision: "queued" | "skipped";
  skipKind?: SkipKind | undefined;
  reason?: string | undefined;
  upstreams: UpstreamRun[];
}

/** One downstream's wait for one slot, as the chain view shows it. */
export interface ChainSlot {
  taskName: string;
  scheduledAt: Date;
  /** waiting: upstreams not settled; queued/running: its run is due or going; ran; skipped. */
  state: "waiting" | "queued" | "running" | "ran" | "skipped";
  upstreams: { name: string; runKey: string; outcome: string | null; disabled: boolean }[];
  condition: string;
  reason: string | null;
  skipKind: string | null;
  outcome: string | null;
  manual: boolean;
  openedAt: Date;
  deadlineAt: Date | null;
  decidedAt: Date | null;
}

export type RunHandler = (run: EngineRun) => Promise<void>;

export interface TaskDefinitionOptions {
  /** The attempt is stopped (its signal fires) and recorded as failed after this long. */
  timeoutMs?: number | undefined;
  retry?: RetryPolicy | undefined;
}

/** A task's job row as the engine reports it (src/engine/jobReads.ts maps it from the SQL row). */
export interface TaskJob {
  id: string;
  name: string;
  disabled: boolean;
  cron: string | null;
  timezone: string | null;
  nextRunAt: Date | null;
  lockedAt: Date | null;
  lastRunAt: Date | null;
  lastFinishedAt: Date | null;
  failCount: number;
  failReason: string | null;
  lastModifiedBy: string | null;
  /** The task's stored policies (`data.policy`; absent on rows without: the defaults). */
  catchUp?: CatchUpPolicy;
  overlap?: OverlapPolicy;
  jitterMs?: number;
  /** The stored pauseOnFailure (absent: never pauses). */
  pauseOnFailure?: number;
  /** The calendars whose slots are skipped (`data.policy.exclude`, docs/calendars.md); absent: none. */
  exclude?: Calendar[];
  /** Set while the task is paused by failure (its row is disabled). */
  pausedByFailure?: PauseMark;
  /** A downstream's dependency (docs/dependencies.md); null for a task with its own cron. */
  after: DependencySpec | null;
}

/**
 * A task's run figures from the run log (one statement), counted in slots: the latest slot's
 * outcome and error, the latest slots' outcomes (newest first), the failed slots since the last
 * succeeded one; and beside them, in attempts, the attempts those failed slots took.
 */
export interface RunSummary {
  taskName: string;
  lastOutcome: RunOutcome | null;
  lastError: string | null;
  recentOutcomes: RunOutcome[];
  consecutiveFailures: number;
  consecutiveFailedAttempts: number;
}

export interface RunRecord {
  taskName: string;
  /** `interrupted`: cut off at shutdown and handed to another instance, which re-ran the slot. */
  outcome: RunOutcome;
  scheduledAt: Date;
  startedAt: Date | null;
  finishedAt: Date;
  durationMs: number | null;
  error: string | null;
  detail: string | null;
  instanceId: string | null;
  attempt: number | null;
  trigger: RunTrigger;
  /** Who asked for a manual run (a token's name, never its secret); null for scheduled runs. */
  requestedBy: string | null;
  rerun: boolean;
}

export interface DrainOutcome {
  completed: number;
  /** Tasks whose run was cut off at the drain deadline and handed to the other instances. */
  handedOff: string[];
  /** Tasks whose handler did not stop within the hand-off wait: their lock expires and is taken over. */
  abandoned: string[];
}

/** The engine's modules name these through this file; they are declared in src/core/runTypes.ts. */
export type { DependencySpec, PreviousRun, RetryPolicy, UpstreamRun };

/** A downstream row made due, to wake the instances for. */
export interface DownstreamWake {
  id: string;
  name: string;
  next_run_at: Date;
}

/**
 * What the engine asks of task dependencies (docs/dependencies.md): a run's start opens its
 * downstreams' waits, its recorded outcome decides them, a downstream's run learns the upstream
 * runs it waited for, and the reconciler's writes set a row's dependency.
 */
export interface TaskDependencies {
  start(): void;
  /** Stops the sweeper and waits for the decisions in flight. */
  stop(): Promise<void>;
  beforeRun(
    taskName: string,
    slot: Date,
    options: { withDownstream: boolean; downstream: boolean },
  ): Promise<UpstreamRun[] | undefined>;
  runStarted(run: EngineRun): void;
  outcomeRecorded(taskName: string, meta: RunLogMeta): void;
  setDependency(taskName: string, spec: DependencySpec | null): Promise<void>;
  /** Expired waits skipped, queued runs made due; `noneTtlMs`: how old a "no downstream" answer may be. */
  sweep(noneTtlMs?: number): Promise<void>;
  chains(query: { tasks?: string[]; limit: number }): Promise<ChainSlot[]>;
}

import type { CatchUpPolicy } from "../core/policies/catchUp.js";
import type { OverlapPolicy } from "../core/policies/overlap.js";
import type { Logger } from "./logger.js";

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
  readonly rerunOf: { scheduledAt: Date | null; startedAt: Date; instanceId: string | null } | undefined;
  /** A child logger bound to this task and run. */
  readonly logger: Logger;
  /** The instance that runs this slot. */
  readonly instanceId: string;
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
  retry?: { maxRetries: number; delayMs?: number; maxDelayMs?: number };
}

/** One task's entry in the desired state, after validation. */
export interface DesiredTask {
  name: string;
  enabled: boolean;
  cron: string;
  /** Always set: the entry's own timezone or the service default. */
  timezone: string;
  /**
   * For an `every:` entry, its interval as written ("15m"); `cron` then holds it as stored in the
   * job row ("15 minutes", src/core/policies/schedule.ts).
   */
  every?: string;
  /**
   * For an `at:` one-shot, its time (ISO); `cron` then names it `at <ISO time>`, and the job row
   * has no repeat interval (src/core/policies/schedule.ts atSchedule).
   */
  at?: string;
  /** What becomes of slots that fall due while a run is going (docs/behaviour.md); absent: skip. */
  overlap?: OverlapPolicy;
  /** A stable per-slot start delay in [0, jitterMs) (docs/behaviour.md, "Jitter"); absent: none. */
  jitterMs?: number;
  /** What runs of the slots missed while nothing ran (docs/behaviour.md); absent: the default. */
  catchUp?: CatchUpPolicy;
}

/** An entry of a snapshot that was refused, with the reason; the task keeps its previous state. */
export interface RejectedEntry {
  /** Position in the snapshot's `tasks` list. */
  index: number;
  /** The entry's name when it had a readable one. */
  name: string | undefined;
  field: string;
  value: unknown;
  reason: string;
  /** Every problem of the entry when it has several (the first is also in field/value/reason). */
  problems?: EntryProblem[];
}

export interface EntryProblem {
  field: string;
  value: unknown;
  reason: string;
}

/** A validated snapshot of the desired state. Only `parseDesiredState` creates one. */
export interface DesiredState {
  tasks: DesiredTask[];
  rejected: RejectedEntry[];
  /** Where it came from (file path, URL) and its revision (content hash, etag). */
  source: string;
  revision: string;
  /** The document as read, kept as the durable last-known desired state once applied. */
  document: unknown;
  /** The document says `confirmDisableAll: true`: it may disable every task (src/scheduler/fleetGuard.ts). */
  confirmDisableAll: boolean;
}

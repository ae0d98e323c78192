/**
 * What the engine knows about each job it has locked or is running, keyed by job id.
 * Agenda overwrites `nextRunAt` and `lastRunAt` before the handler starts, so what the lock
 * returned is kept here; the repository fences its writes on `heldLockAt`, and the run recorder
 * reads the rest to enrich Agenda's log rows.
 */

import type { UpstreamRun } from "../core/dependencies/spec.js";
import type { CatchUpDecision } from "../core/policies/catchUp.js";
import type { RunOutcome } from "../core/runTypes.js";
import type { PreviousRun } from "./engineApi.js";
import type { RunJournal } from "./runJournal.js";

/** The schedule fields of the job row as the save that starts a run left them. */
export interface RowAtStart {
  disabled: boolean;
  repeat_interval: string | null;
  repeat_timezone: string | null;
}

export interface LockedRow {
  nextRunAt: Date | null;
  lockedAt?: Date | undefined;
  lastRunAt?: Date | undefined;
  lastFinishedAt?: Date | undefined;
  /** The job's data: `run` is the identity the last run's start save wrote (see RUN_DATA_KEY). */
  data?: unknown;
}

/** Where a run's start save keeps its identity in the job row's data (src/engine/jobRepository.ts). */
export const RUN_DATA_KEY = "run";

/** The identity a run's start save wrote in the job row, if the row has one. */
export function runOfRow(data: unknown): PreviousRun | undefined {
  const run =
    typeof data === "object" && data !== null ? (data as Record<string, unknown>)[RUN_DATA_KEY] : undefined;
  if (typeof run !== "object" || run === null) return undefined;
  const { slot, startedAt, instanceId } = run as Record<string, unknown>;
  if (typeof slot !== "string" || typeof startedAt !== "string") return undefined;
  const scheduledAt = new Date(slot);
  const started = new Date(startedAt);
  if (Number.isNaN(scheduledAt.getTime()) || Number.isNaN(started.getTime())) return undefined;
  return { scheduledAt, startedAt: started, instanceId: typeof instanceId === "string" ? instanceId : null };
}

export interface RunEntry {
  /** The `next_run_at` the job was locked for: the slot. */
  scheduledAt: Date;
  /** The lock time this instance wrote last: writes to the row are fenced on it. */
  heldLockAt: Date | undefined;
  /** The previous run started and never finished (its instance died or lost the lock). */
  previousRunUnfinished: boolean;
  startedAt?: Date;
  attempt?: number;
  /** This run repeats one that died. */
  rerun?: boolean;
  trigger?: "schedule" | "manual";
  /** Who asked for a manual run (a token's name). */
  requestedBy?: string | undefined;
  outcome?: RunOutcome;
  /** Why a run was skipped or failed, for the log row. */
  detail?: string;
  /** Its outcome row has been written. */
  recorded?: boolean;
  /** The current attempt's captured log lines and error, and the run this one repeats (run detail). */
  journal?: RunJournal;
  error?: Error;
  rerunOf?: PreviousRun;
  /** What the run's start save read back (saves the runner a read of the row). */
  rowAtStart?: RowAtStart;
  /** The row's `last_run_at` when it was locked: restored if the run is released unstarted. */
  lastRunAtBefore: Date | null;
  /**
   * The row's `next_run_at` when it was locked. For a takeover it is the slot after the dead run's:
   * if the dead run had finished its slot, this is the slot still owed (see closeFinishedSlot).
   */
  nextRunAtBefore: Date | null;
  /** The handler never started (the database was unreachable): the final save releases the slot untouched. */
  notStarted?: boolean;
  /** The unfinished previous run, from the identity its start save wrote in the job row. */
  deadRun?: PreviousRun;
  /** The dead run had recorded its slot's outcome: nothing runs; the final save only closes the row. */
  slotAlreadyFinished?: boolean;
  /** Cut off at shutdown: recorded interrupted, and the final save hands the slot to another instance. */
  handedOff?: boolean;
  /** The catch-up decision made at the start save (src/core/policies/catchUp.ts); the runner applies it. */
  catchUp?: CatchUpDecision;
  /** A downstream's run: the upstream runs it waited for (docs/dependencies.md). */
  upstreams?: UpstreamRun[] | undefined;
}

export class RunLedger {
  readonly #entries = new Map<string, RunEntry>();

  locked(jobId: string, row: LockedRow): RunEntry {
    const { lastRunAt, lastFinishedAt } = row;
    const previousRunUnfinished =
      lastRunAt !== undefined && (lastFinishedAt === undefined || lastRunAt > lastFinishedAt);
    // the run that died, as its own start save recorded it: its slot is this run's slot
    const deadRun = previousRunUnfinished ? runOfRow(row.data) : undefined;
    const entry: RunEntry = {
      scheduledAt: deadRun?.scheduledAt ?? row.nextRunAt ?? new Date(),
      heldLockAt: row.lockedAt,
      lastRunAtBefore: row.lastRunAt ?? null,
      nextRunAtBefore: row.nextRunAt,
      previousRunUnfinished,
      ...(deadRun ? { deadRun } : {}),
    };
    this.#entries.set(jobId, entry);
    return entry;
  }

  get(jobId: string): RunEntry | undefined {
    return this.#entries.get(jobId);
  }

  /** Returns the entry for a run that is starting, creating one if the lock went unseen. */
  starting(jobId: string, startedAt: Date, attempt: number): RunEntry {
    const entry = this.#entries.get(jobId) ?? {
      scheduledAt: startedAt,
      heldLockAt: undefined,
      lastRunAtBefore: null,
      nextRunAtBefore: null,
      previousRunUnfinished: false,
    };
    entry.startedAt = startedAt;
    entry.attempt = attempt;
    entry.outcome = undefined;
    entry.detail = undefined;
    entry.recorded = false;
    entry.notStarted = false;
    entry.slotAlreadyFinished = false;
    entry.handedOff = false;
    entry.journal = undefined;
    entry.error = undefined;
    entry.upstreams = undefined;
    this.#entries.set(jobId, entry);
    return entry;
  }

  renewed(jobId: string, heldLockAt: Date | undefined): void {
    const entry = this.#entries.get(jobId);
    if (entry) entry.heldLockAt = heldLockAt;
  }

  /** Jobs this instance holds a lock on (queued or running) that was written after `since`. */
  heldLocks(since: Date): number {
    let held = 0;
    for (const entry of this.#entries.values()) if (entry.heldLockAt && entry.heldLockAt > since) held += 1;
    return held;
  }

  /** The save that starts a run read the row back; the runner's skip check uses it once. */
  startSaved(jobId: string, row: RowAtStart | undefined): void {
    const entry = this.#entries.get(jobId);
    if (entry) entry.rowAtStart = row;
  }

  /** The row as this run's start save saw it, once (a retry or a later run reads the row again). */
  takeRowAtStart(jobId: string): RowAtStart | undefined {
    const entry = this.#entries.get(jobId);
    const row = entry?.rowAtStart;
    if (entry) entry.rowAtStart = undefined;
    return row;
  }

  settle(jobId: string, outcome: RunOutcome, detail?: string): void {
    const entry = this.#entries.get(jobId);
    if (!entry) return;
    entry.outcome = outcome;
    entry.detail = detail;
  }

  forget(jobId: string): void {
    this.#entries.delete(jobId);
  }
}

/**
 * One slot's run on this instance, from the claim to the final save: the record of what the
 * engine knows of it. It is made by the claim (src/engine/jobRepository.ts claimDue) and handed
 * to its one owner, the SlotRunner (src/engine/slotRunner.ts), which drives the whole sequence
 * and is the only caller of the steps below (directly, or through the parts it passes the run
 * to: the start save, the checks, the attempts, the watchdog, the recorder). Nothing finds a run
 * again by its job id.
 *
 * The lock time this instance last wrote, `heldLockAt`, lives here and nowhere else: every write
 * to the row is fenced on it, and the watchdog renews it through `renewed`.
 */

import type { UpstreamRun } from "../core/dependencies/spec.js";
import type { CatchUpDecision } from "../core/policies/catchUp.js";
import type { RunOutcome } from "../core/runTypes.js";
import type { PreviousRun, RunTrigger } from "./engineApi.js";
import type { RunJournal } from "./runJournal.js";

/**
 * Between its lock and its handler a run retries its database calls while the database is
 * unreachable, up to this long before its lock would expire: the lock must still be its own when
 * the handler starts.
 */
export const START_MARGIN_MS = 1_000;

/** The schedule fields of the job row as the save that starts a run left them. */
export interface RowAtStart {
  disabled: boolean;
  repeat_interval: string | null;
  repeat_timezone: string | null;
}

/** The job row as the claim returned it. */
export interface LockedRow {
  nextRunAt: Date | null;
  lockedAt?: Date | undefined;
  lastRunAt?: Date | undefined;
  lastFinishedAt?: Date | undefined;
  /** The job's data: `run` is the identity the last run's start save wrote (see RUN_DATA_KEY). */
  data?: unknown;
}

/** Where a run's start save keeps its identity in the job row's data (src/engine/sql/save.ts). */
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

/**
 * The slot a dead run's row still owes, as the release of its instance's locks kept it
 * (src/engine/sql/instances.ts RELEASE_DEAD_LOCK moves `next_run_at` to now to re-run the slot at once).
 */
export function owedOfRow(data: unknown): Date | undefined {
  const run =
    typeof data === "object" && data !== null ? (data as Record<string, unknown>)[RUN_DATA_KEY] : undefined;
  const owed = typeof run === "object" && run !== null ? (run as Record<string, unknown>).owed : undefined;
  if (typeof owed !== "string") return undefined;
  const at = new Date(owed);
  return Number.isNaN(at.getTime()) ? undefined : at;
}

/** What the run recorder reads of a run to write its log rows, and its one step (src/engine/runRecorder.ts). */
export type RecordedRun = Pick<
  SlotRun,
  | "jobId"
  | "taskName"
  | "scheduledAt"
  | "startedAt"
  | "endedAt"
  | "attempt"
  | "rerun"
  | "rerunOf"
  | "trigger"
  | "requestedBy"
  | "outcome"
  | "detail"
  | "recorded"
  | "journal"
  | "error"
  | "upstreams"
  | "traceparent"
  | "outcomeRecorded"
>;

export class SlotRun {
  readonly jobId: string;
  readonly taskName: string;
  /** The `next_run_at` the job was locked for: the slot (a re-run's or a catch-up's, once known). */
  readonly scheduledAt: Date;
  /** The lock time this instance wrote last: writes to the row are fenced on it. */
  readonly heldLockAt: Date | undefined;
  /** The previous run started and never finished (its instance died or lost the lock). */
  readonly previousRunUnfinished: boolean;
  /** The row's `last_run_at` when it was locked: restored if the run is released unstarted. */
  readonly lastRunAtBefore: Date | null;
  /**
   * The row's `next_run_at` when it was locked. For a takeover it is the slot after the dead run's:
   * if the dead run had finished its slot, this is the slot still owed (see closeFinishedSlot).
   */
  readonly nextRunAtBefore: Date | null;
  /** The unfinished previous run, from the identity its start save wrote in the job row. */
  readonly deadRun?: PreviousRun | undefined;

  /**
   * When its handler may start: the due time of a run handed over ahead of its slot (the start
   * save and the checks come first; src/engine/claimLoop.ts, startAheadMs). Unset: at once.
   */
  readonly handlerAt?: Date | undefined;
  readonly startedAt?: Date | undefined;
  /** When the current attempt's handler settled (its record's end; the bookkeeping may come later). */
  readonly endedAt?: Date | undefined;
  readonly attempt?: number | undefined;
  /** This run repeats one that died. */
  readonly rerun?: boolean | undefined;
  readonly rerunOf?: PreviousRun | undefined;
  readonly trigger?: RunTrigger | undefined;
  /** Who asked for a manual run (a token's name). */
  readonly requestedBy?: string | undefined;
  /** A downstream's run: the upstream runs it waited for (docs/dependencies.md). */
  readonly upstreams?: UpstreamRun[] | undefined;
  /** The catch-up decision made at the start save (src/core/policies/catchUp.ts); the runner applies it. */
  readonly catchUp?: CatchUpDecision | undefined;
  /** What the run's start save read back (saves the runner a read of the row); taken once. */
  readonly rowAtStart?: RowAtStart | undefined;

  readonly outcome?: RunOutcome | undefined;
  /** Why a run was skipped or failed, for the log row. */
  readonly detail?: string | undefined;
  /** Its outcome row has been written. */
  readonly recorded?: boolean | undefined;
  /** The current attempt's captured log lines and error (run detail). */
  readonly journal?: RunJournal | undefined;
  readonly error?: Error | undefined;
  /** The current attempt's span, as a W3C traceparent, when traced (src/observability/tracing.ts). */
  readonly traceparent?: string | undefined;

  /** Cut off at shutdown: if it fails now, it is recorded interrupted and its slot handed to another instance. */
  readonly cutOffAtShutdown?: boolean | undefined;

  private constructor(
    fields: Pick<
      SlotRun,
      | "jobId"
      | "taskName"
      | "scheduledAt"
      | "heldLockAt"
      | "previousRunUnfinished"
      | "lastRunAtBefore"
      | "nextRunAtBefore"
      | "deadRun"
    >,
  ) {
    this.jobId = fields.jobId;
    this.taskName = fields.taskName;
    this.scheduledAt = fields.scheduledAt;
    this.heldLockAt = fields.heldLockAt;
    this.previousRunUnfinished = fields.previousRunUnfinished;
    this.lastRunAtBefore = fields.lastRunAtBefore;
    this.nextRunAtBefore = fields.nextRunAtBefore;
    if (fields.deadRun) this.deadRun = fields.deadRun;
  }

  /** The claim locked the row: its slot is the row's next run, or the dead run's slot for a takeover. */
  static claimed(job: { id: string; name: string }, row: LockedRow, now: Date): SlotRun {
    const { lastRunAt, lastFinishedAt } = row;
    const previousRunUnfinished =
      lastRunAt !== undefined && (lastFinishedAt === undefined || lastRunAt > lastFinishedAt);
    // the run that died, as its own start save recorded it: its slot is this run's slot
    const deadRun = previousRunUnfinished ? runOfRow(row.data) : undefined;
    return new SlotRun({
      jobId: job.id,
      taskName: job.name,
      scheduledAt: deadRun?.scheduledAt ?? row.nextRunAt ?? now,
      heldLockAt: row.lockedAt,
      lastRunAtBefore: row.lastRunAt ?? null,
      // released by the liveness check, the row is due now: the slot it owes is kept in data.run
      nextRunAtBefore: (deadRun && owedOfRow(row.data)) ?? row.nextRunAt,
      previousRunUnfinished,
      deadRun,
    });
  }

  /** Every step below goes through here: the fields are read-only to everyone else. */
  #set(fields: Partial<Omit<SlotRun, "outcomeRecorded">>): void {
    Object.assign(this, fields);
  }

  /** The engine hands the run over before its due time `at`: the runner calls the handler at `at`. */
  startsAt(at: Date): void {
    this.#set({ handlerAt: at });
  }

  /** The lock this instance holds now (a start save or a renewal wrote it), or none (released). */
  fenced(lockAt: Date | undefined): void {
    this.#set({ heldLockAt: lockAt });
  }

  /** The watchdog renewed the lock (src/engine/watchdog.ts WatchedLock). */
  renewed(lockAt: Date): void {
    this.fenced(lockAt);
  }

  /** The latest moment a database call before the handler may still be retried: the lock must outlive it. */
  startDeadline(lockLifetimeMs: number, now: number): number {
    return (this.heldLockAt?.getTime() ?? now) + lockLifetimeMs - START_MARGIN_MS;
  }

  /** The start save read the row back: the runner's skip check uses it once. */
  startSaved(row: RowAtStart | undefined): void {
    this.#set({ rowAtStart: row });
  }

  /** The row as this run's start save saw it, once (a retry or a later run reads the row again). */
  takeRowAtStart(): RowAtStart | undefined {
    const row = this.rowAtStart;
    this.#set({ rowAtStart: undefined });
    return row;
  }

  /** The start plan's catch-up decision, and the slot it runs (src/core/policies/catchUpAtStart.ts). */
  planned(decision: CatchUpDecision, slot: Date): void {
    this.#set({ catchUp: decision, scheduledAt: slot });
  }

  /** The runner takes the run: what an earlier use of this job left is cleared. */
  starting(startedAt: Date): void {
    this.#set({
      startedAt,
      attempt: 1,
      outcome: undefined,
      detail: undefined,
      recorded: false,
      cutOffAtShutdown: false,
      journal: undefined,
      error: undefined,
      upstreams: undefined,
      traceparent: undefined,
    });
  }

  triggeredBy(trigger: RunTrigger, requestedBy: string | undefined): void {
    this.#set({ trigger, requestedBy });
  }

  waitedFor(upstreams: UpstreamRun[] | undefined): void {
    this.#set({ upstreams });
  }

  /** This run repeats `rerunOf` (a run that died), and takes its slot; undefined: an ordinary run. */
  repeats(rerunOf: PreviousRun | undefined): void {
    this.#set({
      rerun: rerunOf !== undefined,
      rerunOf,
      ...(rerunOf?.scheduledAt ? { scheduledAt: rerunOf.scheduledAt } : {}),
    });
  }

  attemptStarted(attempt: number, startedAt: Date): void {
    this.#set({ attempt, startedAt, endedAt: undefined });
  }

  /** The current attempt's span (its rows carry the traceparent). */
  traced(traceparent: string | undefined): void {
    this.#set({ traceparent });
  }

  attemptEnded(journal: RunJournal | undefined, error: Error | undefined, endedAt: Date): void {
    this.#set({ journal, error, endedAt });
  }

  settle(outcome: RunOutcome, detail?: string): void {
    this.#set({ outcome, detail });
  }

  /** The run that died had recorded its slot's outcome: nothing runs, and no outcome row is written. */
  finishedByDeadRun(): void {
    this.#set({ recorded: true });
  }

  /** Past the drain deadline: if it fails now, it is recorded interrupted and its slot handed off. */
  cutOff(): void {
    this.#set({ cutOffAtShutdown: true });
  }

  /** It finished after the cut-off all the same: an ordinary end. */
  endedAfterCutOff(): void {
    this.#set({ cutOffAtShutdown: false });
  }

  outcomeRecorded(): void {
    this.#set({ recorded: true });
  }
}

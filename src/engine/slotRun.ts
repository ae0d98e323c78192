/**
 * One slot's run on this instance, from the claim to the final save: the one object that holds
 * what the engine knows of it. Its fields are read-only outside; each change is a named step
 * below, made by the part of the engine whose step it is:
 *
 * - the claim (src/engine/jobRepository.ts, through RunLedger.claimed): the slot, the lock, the
 *   row as it was; for a run handed over before its slot, when its handler starts (`startsAt`,
 *   src/engine/agendaEngine.ts);
 * - the start save (jobRepository): the lock it wrote (`fenced`), the row it read back
 *   (`startSaved`), the catch-up plan (`planned`); lock renewals and the final save (`fenced`);
 * - the runner (src/engine/taskRunner.ts): the trigger, the re-run, each attempt, the outcome;
 * - the shutdown (src/engine/agendaEngine.ts): a cut-off run handed to another instance;
 * - the run recorder (src/engine/runRecorder.ts): its outcome row written.
 *
 * Agenda overwrites `nextRunAt` and `lastRunAt` of its job object before the handler starts, so
 * what the claim returned is kept here; the repository fences its writes on `heldLockAt`.
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

/** What the run recorder reads of a run to write its log rows, and its one step (src/engine/runRecorder.ts). */
export type RecordedRun = Pick<
  SlotRun,
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
  | "outcomeRecorded"
>;

export class SlotRun {
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
  readonly trigger?: "schedule" | "manual" | undefined;
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

  /** The handler never started (the database was unreachable): the final save releases the slot untouched. */
  readonly notStarted?: boolean | undefined;
  /** The dead run had recorded its slot's outcome: nothing runs; the final save only closes the row. */
  readonly slotAlreadyFinished?: boolean | undefined;
  /** Cut off at shutdown: recorded interrupted, and the final save hands the slot to another instance. */
  readonly handedOff?: boolean | undefined;

  private constructor(
    fields: Pick<
      SlotRun,
      | "scheduledAt"
      | "heldLockAt"
      | "previousRunUnfinished"
      | "lastRunAtBefore"
      | "nextRunAtBefore"
      | "deadRun"
    >,
  ) {
    this.scheduledAt = fields.scheduledAt;
    this.heldLockAt = fields.heldLockAt;
    this.previousRunUnfinished = fields.previousRunUnfinished;
    this.lastRunAtBefore = fields.lastRunAtBefore;
    this.nextRunAtBefore = fields.nextRunAtBefore;
    if (fields.deadRun) this.deadRun = fields.deadRun;
  }

  /** The claim locked the row: its slot is the row's next run, or the dead run's slot for a takeover. */
  static claimed(row: LockedRow, now: Date): SlotRun {
    const { lastRunAt, lastFinishedAt } = row;
    const previousRunUnfinished =
      lastRunAt !== undefined && (lastFinishedAt === undefined || lastRunAt > lastFinishedAt);
    // the run that died, as its own start save recorded it: its slot is this run's slot
    const deadRun = previousRunUnfinished ? runOfRow(row.data) : undefined;
    return new SlotRun({
      scheduledAt: deadRun?.scheduledAt ?? row.nextRunAt ?? now,
      heldLockAt: row.lockedAt,
      lastRunAtBefore: row.lastRunAt ?? null,
      nextRunAtBefore: row.nextRunAt,
      previousRunUnfinished,
      deadRun,
    });
  }

  /** A run whose claim this instance did not see (the runner starts it all the same). */
  static unclaimed(startedAt: Date): SlotRun {
    return new SlotRun({
      scheduledAt: startedAt,
      heldLockAt: undefined,
      lastRunAtBefore: null,
      nextRunAtBefore: null,
      previousRunUnfinished: false,
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
      notStarted: false,
      slotAlreadyFinished: false,
      handedOff: false,
      journal: undefined,
      error: undefined,
      upstreams: undefined,
    });
  }

  triggeredBy(trigger: "schedule" | "manual", requestedBy: string | undefined): void {
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

  attemptEnded(journal: RunJournal | undefined, error: Error | undefined, endedAt: Date): void {
    this.#set({ journal, error, endedAt });
  }

  settle(outcome: RunOutcome, detail?: string): void {
    this.#set({ outcome, detail });
  }

  /** The run that died had recorded its slot's outcome: nothing runs, and no outcome row is written. */
  finishedByDeadRun(): void {
    this.#set({ slotAlreadyFinished: true, recorded: true });
  }

  /** The database was unreachable before the handler: the final save gives the slot back untouched. */
  notStartedAfterAll(): void {
    this.#set({ notStarted: true });
  }

  /** Past the drain deadline: if it fails now, it is recorded interrupted and its slot handed off. */
  cutOff(): void {
    this.#set({ handedOff: true });
  }

  /** It finished after the cut-off all the same: an ordinary end. */
  endedAfterCutOff(): void {
    this.#set({ handedOff: false });
  }

  outcomeRecorded(): void {
    this.#set({ recorded: true });
  }
}

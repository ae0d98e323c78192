/**
 * What the engine knows about each job it has locked or is running, keyed by job id.
 * Agenda overwrites `nextRunAt` and `lastRunAt` before the handler starts, so what the lock
 * returned is kept here; the repository fences its writes on `lockToken`, and the run recorder
 * reads the rest to enrich Agenda's log rows.
 */

export type RunOutcome = "succeeded" | "failed" | "skipped";

export interface LockedRow {
  nextRunAt: Date | null;
  lockedAt?: Date | undefined;
  lastRunAt?: Date | undefined;
  lastFinishedAt?: Date | undefined;
}

export interface RunEntry {
  /** The `next_run_at` the job was locked for: the slot. */
  scheduledAt: Date;
  /** The lock time this instance wrote last: writes to the row are fenced on it. */
  lockToken: Date | undefined;
  /** The previous run started and never finished (its instance died or lost the lock). */
  previousRunUnfinished: boolean;
  startedAt?: Date;
  attempt?: number;
  /** This run repeats one that died. */
  rerun?: boolean;
  trigger?: "schedule" | "manual";
  outcome?: RunOutcome;
  /** Why a run was skipped or failed, for the log row. */
  detail?: string;
  /** Its outcome row has been written. */
  recorded?: boolean;
}

export class RunLedger {
  readonly #entries = new Map<string, RunEntry>();

  locked(jobId: string, row: LockedRow): RunEntry {
    const { lastRunAt, lastFinishedAt } = row;
    const entry: RunEntry = {
      scheduledAt: row.nextRunAt ?? new Date(),
      lockToken: row.lockedAt,
      previousRunUnfinished:
        lastRunAt !== undefined && (lastFinishedAt === undefined || lastRunAt > lastFinishedAt),
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
      lockToken: undefined,
      previousRunUnfinished: false,
    };
    entry.startedAt = startedAt;
    entry.attempt = attempt;
    entry.outcome = undefined;
    entry.detail = undefined;
    entry.recorded = false;
    this.#entries.set(jobId, entry);
    return entry;
  }

  renewed(jobId: string, lockToken: Date | undefined): void {
    const entry = this.#entries.get(jobId);
    if (entry) entry.lockToken = lockToken;
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

/**
 * What the engine knows about each job it has locked or is running, keyed by job id.
 * Agenda overwrites `nextRunAt` before the handler starts, so the slot a run is for is taken
 * here at lock time; the run recorder reads the rest to enrich Agenda's log rows.
 */

export type RunOutcome = "succeeded" | "failed" | "skipped";

export interface RunEntry {
  /** The `next_run_at` the job was locked for: the slot. */
  scheduledAt: Date;
  startedAt?: Date;
  attempt?: number;
  outcome?: RunOutcome;
  /** Why a run was skipped or failed, for the log row. */
  detail?: string;
}

export class RunLedger {
  readonly #entries = new Map<string, RunEntry>();

  locked(jobId: string, scheduledAt: Date | null): void {
    this.#entries.set(jobId, { scheduledAt: scheduledAt ?? new Date() });
  }

  get(jobId: string): RunEntry | undefined {
    return this.#entries.get(jobId);
  }

  /** Returns the entry for a run that is starting, creating one if the lock went unseen. */
  starting(jobId: string, startedAt: Date, attempt: number): RunEntry {
    const entry = this.#entries.get(jobId) ?? { scheduledAt: startedAt };
    entry.startedAt = startedAt;
    entry.attempt = attempt;
    entry.outcome = undefined;
    entry.detail = undefined;
    this.#entries.set(jobId, entry);
    return entry;
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

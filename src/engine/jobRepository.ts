import { PostgresJobRepository } from "@agendajs/postgres-backend";
import type { JobParameters, JobRepositoryOptions } from "agenda";
import type { Pool } from "pg";
import type { RunLedger } from "./runLedger.js";
import { JOBS_TABLE } from "./sql.js";

/**
 * Agenda's PostgreSQL repository with two changes:
 * - every lock records the slot (`next_run_at` at lock time) in the RunLedger, because
 *   Agenda overwrites `nextRunAt` before the handler starts;
 * - `saveJobState` does not overwrite `next_run_at` when the row's cron or timezone changed
 *   since the job was loaded. Without this, a run that finishes after an in-place schedule
 *   change writes a next run computed from the old cron (AGENDA-NOTES).
 */
export class CronwardenJobRepository extends PostgresJobRepository {
  readonly #db: Pool;
  readonly #ledger: RunLedger;

  constructor(pool: Pool, ledger: RunLedger) {
    super({ pool, tableName: JOBS_TABLE, ensureSchema: false });
    this.#db = pool;
    this.#ledger = ledger;
  }

  override async getNextJobToRun(
    jobName: string,
    nextScanAt: Date,
    lockDeadline: Date,
    now: Date | undefined,
    options: JobRepositoryOptions | undefined,
  ): Promise<JobParameters | undefined> {
    const job = await super.getNextJobToRun(jobName, nextScanAt, lockDeadline, now, options);
    if (job?._id) this.#ledger.locked(String(job._id), job.nextRunAt);
    return job;
  }

  override async lockJob(
    job: JobParameters,
    options: JobRepositoryOptions | undefined,
  ): Promise<JobParameters | undefined> {
    const locked = await super.lockJob(job, options);
    if (locked?._id) this.#ledger.locked(String(locked._id), locked.nextRunAt);
    return locked;
  }

  /** Same statement as PostgresJobRepository 3.0.6, plus the guard on next_run_at. */
  override async saveJobState(job: JobParameters, options: JobRepositoryOptions | undefined): Promise<void> {
    if (!job._id) throw new Error("Cannot save job state without job ID");
    const result = await this.#db.query(
      `UPDATE "${JOBS_TABLE}"
          SET locked_at = $2,
              next_run_at = CASE
                WHEN repeat_interval IS NOT DISTINCT FROM $12 AND repeat_timezone IS NOT DISTINCT FROM $13
                THEN $3 ELSE next_run_at END,
              last_run_at = $4,
              progress = $5,
              fail_reason = $6,
              fail_count = $7,
              failed_at = $8,
              last_finished_at = $9,
              last_modified_by = $11
        WHERE id = $1 AND name = $10`,
      [
        String(job._id),
        job.lockedAt ?? null,
        job.nextRunAt ?? null,
        job.lastRunAt ?? null,
        job.progress ?? null,
        job.failReason ?? null,
        job.failCount ?? null,
        job.failedAt ?? null,
        job.lastFinishedAt ?? null,
        job.name,
        options?.lastModifiedBy ?? null,
        job.repeatInterval === undefined ? null : String(job.repeatInterval),
        job.repeatTimezone ?? null,
      ],
    );
    if (result.rowCount !== 1) {
      throw new Error(
        `job ${job._id} (name: ${job.name}) cannot be updated in the database, maybe it does not exist anymore?`,
      );
    }
  }
}

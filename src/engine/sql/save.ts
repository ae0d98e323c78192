import type { JobParameters } from "agenda";
import { FAILURE_STREAK_KEY, PAUSE_DATA_KEY } from "../../core/policies/pauseOnFailure.js";
import { type RowAtStart, RUN_DATA_KEY } from "../runLedger.js";
import { JOBS_TABLE, type Queryable } from "./tables.js";

/**
 * Agenda's save of a job's state (PostgresJobRepository.saveJobState, @agendajs/postgres-backend
 * 3.0.6), used for the save that starts a run and the one that ends it, with three changes:
 * - fenced: it writes only while the row's lock is one of `fence` (the lock times this instance
 *   wrote), so a run that lost its lock cannot unlock or re-time the new owner's run;
 * - `next_run_at` is kept when the row's cron or timezone changed since the job was loaded (a run
 *   ending after a re-timing would write a next run of the old cron);
 * - the save that starts a run (`startingSlot`) writes the run's identity (slot, start, instance)
 *   into `data.run` in the same statement, so a takeover knows the slot of a run that died
 *   before its start row reached the run log.
 * - the save that ends a slot may carry the failure streak and the pause mark (`end`, decided by
 *   src/core/policies/pauseOnFailure.ts under the row lock of the same transaction): written in the
 *   same statement, so the save cannot undo the pause, and a pause disables the row.
 * Returns the schedule fields as saved (the check before the handler reads them), or null when no
 * row matched (the lock was not ours, or the row is gone).
 */
export async function saveJobRow(
  db: Queryable,
  save: {
    job: JobParameters;
    lastModifiedBy: string | null;
    fence: Date[] | null;
    startingSlot: Date | null;
    /** For the save that ends a slot: the failed slots in a row, and the pause mark if it pauses now. */
    end?: { streak: number; pause: Record<string, unknown> | null } | undefined;
  },
): Promise<RowAtStart | null> {
  const { job } = save;
  const result = await db.query<RowAtStart>(
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
            last_modified_by = $11::text,
            data = CASE
              WHEN $15::text IS NOT NULL THEN coalesce(data, '{}'::jsonb) || jsonb_build_object(
                '${RUN_DATA_KEY}', jsonb_build_object('slot', $15::text, 'startedAt', $4::timestamptz, 'instanceId', $11::text))
              WHEN $16::int IS NULL THEN data
              ELSE coalesce(data, '{}'::jsonb) || jsonb_build_object('${FAILURE_STREAK_KEY}', $16::int)
                || CASE WHEN $17::jsonb IS NULL THEN '{}'::jsonb ELSE jsonb_build_object('${PAUSE_DATA_KEY}', $17::jsonb) END
              END,
            disabled = CASE WHEN $17::jsonb IS NULL THEN disabled ELSE TRUE END
      WHERE id = $1 AND name = $10
        AND ($14::timestamptz[] IS NULL OR date_trunc('milliseconds', locked_at) = ANY($14::timestamptz[]))
      RETURNING disabled, repeat_interval, repeat_timezone`,
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
      save.lastModifiedBy,
      job.repeatInterval === undefined ? null : String(job.repeatInterval),
      job.repeatTimezone ?? null,
      save.fence,
      save.startingSlot?.toISOString() ?? null,
      save.end?.streak ?? null,
      save.end?.pause ? JSON.stringify(save.end.pause) : null,
    ],
  );
  return result.rowCount === 1 ? (result.rows[0] ?? null) : null;
}

/**
 * Read under the row lock (SELECT ... FOR UPDATE, in the transaction of the save that ends a slot):
 * what the pause decision needs. Fenced like the save: no row when the lock is not this instance's.
 */
export async function selectEndState(
  db: Queryable,
  jobId: string,
  fence: Date[],
): Promise<{ disabled: boolean; data: unknown } | undefined> {
  const result = await db.query<{ disabled: boolean; data: unknown }>(
    `SELECT disabled, data FROM "${JOBS_TABLE}"
      WHERE id = $1 AND date_trunc('milliseconds', locked_at) = ANY($2::timestamptz[])
      FOR UPDATE`,
    [jobId, fence],
  );
  return result.rows[0];
}

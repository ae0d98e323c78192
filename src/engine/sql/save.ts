import type { JobParameters } from "agenda";
import { FAILURE_STREAK_KEY, PAUSE_DATA_KEY } from "../../core/policies/pauseOnFailure.js";
import { type RowAtStart, RUN_DATA_KEY } from "../slotRun.js";
import { JOBS_TABLE, jsonRecords, jsonTime, type Queryable } from "./tables.js";

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
export interface JobRowSave {
  job: JobParameters;
  lastModifiedBy: string | null;
  fence: Date[] | null;
  startingSlot: Date | null;
  /** For the save that ends a slot: the failed slots in a row, and the pause mark if it pauses now. */
  end?: { streak: number; pause: Record<string, unknown> | null } | undefined;
}

export async function saveJobRow(db: Queryable, save: JobRowSave): Promise<RowAtStart | null> {
  return (await saveJobRows(db, [save]))[0] ?? null;
}

/**
 * Several saves in one statement (src/db/statementBatch.ts batches the saves of a herd), each
 * with its own fence; no two may be of the same job. Answers one entry per save, in order.
 */
export async function saveJobRows(
  db: Queryable,
  saves: readonly JobRowSave[],
): Promise<(RowAtStart | null)[]> {
  if (saves.length === 0) return [];
  const result = await db.query<RowAtStart & { id: string }>(
    `UPDATE "${JOBS_TABLE}" AS j
        SET locked_at = v.locked_at,
            next_run_at = CASE
              WHEN j.repeat_interval IS NOT DISTINCT FROM v.repeat_interval
               AND j.repeat_timezone IS NOT DISTINCT FROM v.repeat_timezone
              THEN v.next_run_at ELSE j.next_run_at END,
            last_run_at = v.last_run_at,
            progress = v.progress,
            fail_reason = v.fail_reason,
            fail_count = v.fail_count,
            failed_at = v.failed_at,
            last_finished_at = v.last_finished_at,
            last_modified_by = v.last_modified_by,
            data = CASE
              WHEN v.starting_slot IS NOT NULL THEN coalesce(j.data, '{}'::jsonb) || jsonb_build_object(
                '${RUN_DATA_KEY}', jsonb_build_object('slot', v.starting_slot, 'startedAt', v.last_run_at, 'instanceId', v.last_modified_by))
              WHEN v.streak IS NULL THEN j.data
              ELSE coalesce(j.data, '{}'::jsonb) || jsonb_build_object('${FAILURE_STREAK_KEY}', v.streak)
                || CASE WHEN v.pause IS NULL THEN '{}'::jsonb ELSE jsonb_build_object('${PAUSE_DATA_KEY}', v.pause) END
              END,
            disabled = CASE WHEN v.pause IS NULL THEN j.disabled ELSE TRUE END
       FROM jsonb_to_recordset($1::jsonb)
         AS v(id uuid, locked_at timestamptz, next_run_at timestamptz, last_run_at timestamptz, progress real,
              fail_reason text, fail_count int, failed_at timestamptz, last_finished_at timestamptz, name text,
              last_modified_by text, repeat_interval text, repeat_timezone text, fenced boolean,
              fence_a timestamptz, fence_b timestamptz, starting_slot text, streak int, pause jsonb)
      WHERE j.id = v.id AND j.name = v.name
        AND (NOT v.fenced OR date_trunc('milliseconds', j.locked_at) IN (v.fence_a, v.fence_b))
      RETURNING j.id, j.disabled, j.repeat_interval, j.repeat_timezone`,
    [
      jsonRecords(
        saves.map((save) => ({
          id: String(save.job._id),
          locked_at: jsonTime(save.job.lockedAt),
          next_run_at: jsonTime(save.job.nextRunAt),
          last_run_at: jsonTime(save.job.lastRunAt),
          progress: save.job.progress ?? null,
          fail_reason: save.job.failReason ?? null,
          fail_count: save.job.failCount ?? null,
          failed_at: jsonTime(save.job.failedAt),
          last_finished_at: jsonTime(save.job.lastFinishedAt),
          name: save.job.name,
          last_modified_by: save.lastModifiedBy,
          repeat_interval: save.job.repeatInterval === undefined ? null : String(save.job.repeatInterval),
          repeat_timezone: save.job.repeatTimezone ?? null,
          fenced: save.fence !== null,
          fence_a: jsonTime(save.fence?.[0]),
          fence_b: jsonTime(save.fence?.[1]),
          starting_slot: jsonTime(save.startingSlot),
          streak: save.end?.streak ?? null,
          pause: save.end?.pause ?? null,
        })),
      ),
    ],
  );
  const saved = new Map(
    result.rows.map((row) => [
      row.id,
      { disabled: row.disabled, repeat_interval: row.repeat_interval, repeat_timezone: row.repeat_timezone },
    ]),
  );
  return saves.map((save) => saved.get(String(save.job._id)) ?? null);
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

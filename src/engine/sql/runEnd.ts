import { JOBS_TABLE, type Queryable } from "./tables.js";

/**
 * The ways a run gives its job row back besides Agenda's own end-of-run save (which is fenced in
 * src/engine/jobRepository.ts): never started, already finished by a dead run, handed off at
 * shutdown. Each is fenced on this instance's lock.
 */

/**
 * Gives a slot back untouched when its handler never started (the database was unreachable before
 * it): unlocked, due at its slot again, `last_run_at` as before (so the next run is not taken for
 * a re-run of a dead one). Fenced on the lock times this instance may have written: the one it
 * locked with, and the one its start save wrote if that save landed but its answer was lost.
 */
export async function releaseUnstartedRun(
  db: Queryable,
  release: { jobId: string; fences: Date[]; slot: Date; lastRunAt: Date | null },
): Promise<boolean> {
  const result = await db.query(
    `UPDATE "${JOBS_TABLE}" SET locked_at = NULL, next_run_at = $3, last_run_at = $4
      WHERE id = $1 AND date_trunc('milliseconds', locked_at) = ANY($2::timestamptz[])`,
    [release.jobId, release.fences, release.slot, release.lastRunAt],
  );
  return result.rowCount === 1;
}

/**
 * Ends a taken-over run whose slot was already finished by the run that died (its outcome row
 * exists; only its job-row save was lost): unlocked and marked finished. Its next run goes back to
 * the slot the row owed when it was locked (`owed`, the slot after the dead run's): the taker's
 * own start save moved it past now, which would skip that slot. Kept as it is if the schedule was
 * changed since the lock (a re-timing computed its own next run). Fenced on this instance's lock.
 */
export async function closeFinishedSlot(
  db: Queryable,
  close: { jobId: string; fence: Date; owed: Date | null; cron: string | null; timezone: string | null },
): Promise<boolean> {
  const result = await db.query(
    `UPDATE "${JOBS_TABLE}" SET locked_at = NULL, last_finished_at = now(),
            next_run_at = CASE
              WHEN $3::timestamptz IS NOT NULL AND repeat_interval IS NOT DISTINCT FROM $4
                AND repeat_timezone IS NOT DISTINCT FROM $5
              THEN least(next_run_at, $3::timestamptz) ELSE next_run_at END
      WHERE id = $1 AND date_trunc('milliseconds', locked_at) = $2`,
    [close.jobId, close.fence, close.owed, close.cron, close.timezone],
  );
  return result.rowCount === 1;
}

/**
 * Hands a run cut off at shutdown to the other instances: unlocked and due now, its start
 * (`last_run_at`, `data.run`) kept, so the next instance to lock it re-runs the same slot at once as
 * a re-run. Fenced on this instance's lock.
 */
export async function handOffRun(db: Queryable, jobId: string, fence: Date): Promise<boolean> {
  const result = await db.query(
    `UPDATE "${JOBS_TABLE}" SET locked_at = NULL, next_run_at = now()
      WHERE id = $1 AND date_trunc('milliseconds', locked_at) = $2`,
    [jobId, fence],
  );
  return result.rowCount === 1;
}

import { JOBS_TABLE, type Queryable } from "./tables.js";

/** Claiming a job and holding its lock: the poll's statements, the watchdog's renewal, a release. */

/**
 * When a lock counts as expired, so that another instance may take the job over: older than the
 * deadline, and the server has been up for a whole lock lifetime. After a server restart nobody
 * could renew a lock while it was down, so an old lock time says nothing yet about its owner. Decided
 * by the server in the statement itself: an instance that has not noticed the restart yet (its
 * health probe comes later, or its statement waited for a connection) must not take over either.
 */
const LOCK_EXPIRED = (deadline: string, lifetimeMs: string) =>
  `(locked_at <= ${deadline} AND pg_postmaster_start_time() <= now() - make_interval(secs => ${lifetimeMs}::double precision / 1000))`;

/**
 * The names of jobs a poll could lock: due (unlocked, next run before `until`) or with an expired
 * lock. The same predicate as lockNextJob, for all names in one statement.
 */
export async function selectLockableJobNames(
  db: Queryable,
  until: Date,
  lockDeadline: Date,
  lockLifetimeMs: number,
): Promise<Set<string>> {
  const result = await db.query<{ name: string }>(
    `SELECT name FROM "${JOBS_TABLE}"
      WHERE disabled = FALSE AND ((locked_at IS NULL AND next_run_at <= $1) OR ${LOCK_EXPIRED("$2", "$3")})
      GROUP BY name ORDER BY min(next_run_at) NULLS LAST`,
    [until, lockDeadline, lockLifetimeMs],
  );
  return new Set(result.rows.map((row) => row.name));
}

/**
 * Locks the next job of a name: due and unlocked, or its lock expired (LOCK_EXPIRED). Agenda's
 * own statement (PostgresJobRepository.getNextJobToRun, @agendajs/postgres-backend 3.0.6) with the
 * restart guard added; returns the locked row as stored.
 */
export async function lockNextJob(
  db: Queryable,
  lock: {
    name: string;
    nextScanAt: Date;
    lockDeadline: Date;
    lockedAt: Date;
    owner: string | null;
    lockLifetimeMs: number;
  },
): Promise<Record<string, unknown> | undefined> {
  const result = await db.query(
    `UPDATE "${JOBS_TABLE}" SET locked_at = $1, last_modified_by = $5
      WHERE id = (
        SELECT id FROM "${JOBS_TABLE}"
         WHERE name = $2 AND disabled = FALSE
           AND ((locked_at IS NULL AND next_run_at <= $3) OR ${LOCK_EXPIRED("$4", "$6")})
         ORDER BY next_run_at ASC NULLS LAST, priority DESC
         LIMIT 1
         FOR UPDATE SKIP LOCKED)
      RETURNING *`,
    [lock.lockedAt, lock.name, lock.nextScanAt, lock.lockDeadline, lock.owner, lock.lockLifetimeMs],
  );
  return result.rows[0];
}

/** The watchdog's fenced renewal: moves the lock only if the row still holds the time we wrote. */
export async function renewLock(db: Queryable, jobId: string, expected: Date, next: Date): Promise<boolean> {
  const result = await db.query(
    `UPDATE "${JOBS_TABLE}" SET locked_at = $3 WHERE id = $1 AND date_trunc('milliseconds', locked_at) = $2`,
    [jobId, expected, next],
  );
  return result.rowCount === 1;
}

/**
 * Releases a lock, fenced on its value: a lock nobody renews any more (its owner is gone), or a
 * pre-locked job this instance will not run.
 */
export async function releaseLock(db: Queryable, jobId: string, lockedAt: Date): Promise<boolean> {
  const result = await db.query(
    `UPDATE "${JOBS_TABLE}" SET locked_at = NULL WHERE id = $1 AND date_trunc('milliseconds', locked_at) = $2`,
    [jobId, lockedAt],
  );
  return result.rowCount === 1;
}

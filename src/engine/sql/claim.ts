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
 * The claim loop's one statement per pass (src/engine/claimLoop.ts): locks up to `limit` jobs of
 * the given names that are due before `until` (the look-ahead) and unlocked, or whose lock expired
 * (LOCK_EXPIRED), most overdue first, skipping rows another instance is locking right now.
 * `skipNames` are jobs this instance still holds or is ending (their row may not show it yet).
 * Returns the locked rows as stored. The same predicate as Agenda's own per-name statement
 * (PostgresJobRepository.getNextJobToRun, @agendajs/postgres-backend 3.0.6), for all names at once.
 */
export async function claimDueJobs(
  db: Queryable,
  claim: {
    /** The names, or their array literal (textArrayLiteral, src/engine/sql/missedSlots.ts) made once. */
    names: readonly string[] | string;
    skipNames: readonly string[];
    until: Date;
    lockDeadline: Date;
    lockedAt: Date;
    owner: string | null;
    lockLifetimeMs: number;
    limit: number;
  },
): Promise<Record<string, unknown>[]> {
  if (claim.limit <= 0 || claim.names.length === 0 || claim.names === "{}") return [];
  const result = await db.query(
    `UPDATE "${JOBS_TABLE}" SET locked_at = $1, last_modified_by = $2
      WHERE id IN (
        SELECT id FROM "${JOBS_TABLE}"
         WHERE disabled = FALSE AND name = ANY($3::text[]) AND NOT (name = ANY($4::text[]))
           AND ((locked_at IS NULL AND next_run_at <= $5) OR ${LOCK_EXPIRED("$6", "$7")})
         ORDER BY next_run_at ASC NULLS LAST, priority DESC
         LIMIT $8
         FOR UPDATE SKIP LOCKED)
      RETURNING *`,
    [
      claim.lockedAt,
      claim.owner,
      claim.names,
      claim.skipNames,
      claim.until,
      claim.lockDeadline,
      claim.lockLifetimeMs,
      claim.limit,
    ],
  );
  return result.rows;
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

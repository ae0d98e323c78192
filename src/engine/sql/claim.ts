import { INSTANCES_TABLE, JOBS_TABLE, jsonRecords, jsonTime, type Queryable } from "./tables.js";

/** Claiming a job and holding its lock: the poll's statements, the watchdog's renewal, a release. */

/**
 * When a lock counts as expired, so that another instance may take the job over: older than the
 * deadline, and the server has been the primary for a whole lock lifetime. After a server restart
 * nobody could renew a lock while it was down, so an old lock time says nothing yet about its owner.
 * Decided by the server in the statement itself: an instance that has not noticed the restart yet
 * (its health probe comes later, or its statement waited for a connection) must not take over
 * either. A standby promoted by a failover or switchover keeps its own, older start time; the last
 * transaction it replayed before the promotion (pg_last_xact_replay_timestamp(), NULL on a server
 * that never replayed one) dates the moment the old primary stopped writing. GREATEST skips NULLs.
 */
const LOCK_EXPIRED = (deadline: string, lifetimeMs: string) =>
  `(locked_at <= ${deadline} AND GREATEST(pg_postmaster_start_time(), pg_last_xact_replay_timestamp()) <= now() - make_interval(secs => ${lifetimeMs}::double precision / 1000))`;

/** The columns of a claimed row that hold its lock before the claim (claimDueJobs). */
export const PREVIOUS_LOCK = "cw_previous_locked_at";
export const PREVIOUS_OWNER = "cw_previous_modified_by";

/**
 * The claim's own index: the rows a pass may lock when due (unlocked, enabled), in the order it
 * takes them. Agenda's indexes lead with the name (its processor locks one name per statement) or
 * carry no priority, so a pass over many names sorted every due row: in a herd of 10,000 that was
 * 17 ms of the server's time per pass (4.7 ms planning the list of names, 7.9 ms checking every row
 * against it and sorting the due ones; docs/design.md, "The claim loop").
 * A run's claim and start save leave the index (their rows are locked); its final save re-enters it.
 */
export const CREATE_DUE_INDEX = `
  CREATE INDEX IF NOT EXISTS "cronwarden_jobs_due_idx" ON "${JOBS_TABLE}" (next_run_at ASC, priority DESC)
   WHERE disabled = FALSE AND locked_at IS NULL`;

/**
 * The claim loop's one statement per pass (src/engine/claimLoop.ts): locks up to `limit` jobs due
 * before `until` (the look-ahead) and unlocked, or whose lock expired (LOCK_EXPIRED), most overdue
 * first, skipping rows another instance is locking right now. The same predicate as Agenda's own
 * per-name statement (PostgresJobRepository.getNextJobToRun, @agendajs/postgres-backend 3.0.6), in
 * two halves so that the due half reads CREATE_DUE_INDEX in order and stops at `limit` rows.
 * - `names`: only these names; null for any name. The engine passes null: a list of every task it
 *   defines is planned again at every pass, which is what made the pass slow (CREATE_DUE_INDEX).
 *   It gives back a job of a name it does not define and leaves that name alone afterwards
 *   (src/engine/agendaEngine.ts, claim).
 * - `skipNames`: jobs this instance still holds or is ending (their row may not show it yet), and
 *   names it does not define.
 * - `share`: claim no more than this instance's share of a herd: the enabled jobs due before
 *   `until` (locked or not) divided among the registered instances (src/engine/liveness.ts), less
 *   the `held` ones, but at least `atLeast`. Without it, `limit` alone.
 * Returns the locked rows as stored, each with the lock it had before (PREVIOUS_LOCK, PREVIOUS_OWNER)
 * for restoreLock.
 */
export async function claimDueJobs(
  db: Queryable,
  claim: {
    names: readonly string[] | null;
    skipNames: readonly string[];
    until: Date;
    lockDeadline: Date;
    lockedAt: Date;
    owner: string | null;
    lockLifetimeMs: number;
    limit: number;
    share?: { atLeast: number; held: number };
  },
): Promise<Record<string, unknown>[]> {
  if (claim.limit <= 0 || claim.names?.length === 0) return [];
  const ofName = `($3::text[] IS NULL OR name = ANY($3::text[])) AND NOT (name = ANY($4::text[]))`;
  // a count of the due rows by Agenda's next_run_at index: at idle a handful, in a herd the herd
  const share = `ceil((SELECT count(*) FROM "${JOBS_TABLE}" WHERE disabled = FALSE AND next_run_at <= $5)::numeric
       / greatest(1, (SELECT count(*) FROM "${INSTANCES_TABLE}")))::int - $10::int`;
  const result = await db.query(
    `WITH quota AS (
        SELECT CASE WHEN $9::int IS NULL THEN $8::int
               ELSE greatest(0, least($8::int, greatest($9::int, ${share}))) END AS n),
      due AS (
        SELECT id, next_run_at, priority, locked_at, last_modified_by FROM "${JOBS_TABLE}"
         WHERE disabled = FALSE AND locked_at IS NULL AND next_run_at <= $5 AND ${ofName}
         ORDER BY next_run_at ASC, priority DESC
         LIMIT (SELECT n FROM quota)
         FOR UPDATE SKIP LOCKED),
      expired AS (
        SELECT id, next_run_at, priority, locked_at, last_modified_by FROM "${JOBS_TABLE}"
         WHERE disabled = FALSE AND ${LOCK_EXPIRED("$6", "$7")} AND ${ofName}
         ORDER BY next_run_at ASC NULLS LAST, priority DESC
         LIMIT (SELECT n FROM quota)
         FOR UPDATE SKIP LOCKED),
      picked AS (
        SELECT * FROM (SELECT * FROM due UNION ALL SELECT * FROM expired) AS candidates
         ORDER BY next_run_at ASC NULLS LAST, priority DESC
         LIMIT (SELECT n FROM quota))
     UPDATE "${JOBS_TABLE}" AS j SET locked_at = $1, last_modified_by = $2
       FROM picked
      WHERE j.id = picked.id
      RETURNING j.*, picked.locked_at AS ${PREVIOUS_LOCK}, picked.last_modified_by AS ${PREVIOUS_OWNER}`,
    [
      claim.lockedAt,
      claim.owner,
      claim.names,
      claim.skipNames,
      claim.until,
      claim.lockDeadline,
      claim.lockLifetimeMs,
      claim.limit,
      claim.share?.atLeast ?? null,
      claim.share?.held ?? 0,
    ],
  );
  return result.rows;
}

/**
 * Puts back the lock a claim replaced (`previous`: a lock time and its owner, or none), fenced on
 * the claim's own lock. A job this instance does not define goes back as it was: an expired lock
 * stays expired, so that an instance that defines it takes the dead run over; a lock freed instead
 * would leave a plain future job, its dead run's slot lost.
 */
export async function restoreLock(
  db: Queryable,
  jobId: string,
  claimedAt: Date,
  previous: { lockedAt: Date | null; owner: string | null },
): Promise<boolean> {
  const result = await db.query(
    `UPDATE "${JOBS_TABLE}" SET locked_at = $3, last_modified_by = $4
      WHERE id = $1 AND date_trunc('milliseconds', locked_at) = $2`,
    [jobId, claimedAt, previous.lockedAt, previous.owner],
  );
  return result.rowCount === 1;
}

/**
 * The fenced renewal of a running job's lock ($1 job id, $2 the lock time we wrote, $3 the new one):
 * moves the lock only if the row still holds the time we wrote. One row back: `renewed`, and when
 * not, who holds the row now (`holder`, `held_at`: the row as it was before this statement); no row:
 * the job row is gone. Run by the lock keeper's thread (src/engine/lockKeeperThread.mjs) and by the
 * in-process watchdog (renewLock).
 */
export const RENEW_LOCK_SQL = `
  WITH renewed AS (
    UPDATE "${JOBS_TABLE}" SET locked_at = $3 WHERE id = $1 AND date_trunc('milliseconds', locked_at) = $2
    RETURNING id)
  SELECT EXISTS (SELECT 1 FROM renewed) AS renewed, last_modified_by AS holder, locked_at AS held_at
    FROM "${JOBS_TABLE}" WHERE id = $1`;

/** Who holds a lock this instance lost: the row's owner and lock time, or none when the row is gone. */
export type LockHolder = { holder: string | null; heldAt: Date | null } | undefined;

/** What a renewal found: renewed, or the lock's holder now. */
export type LockRenewal = { renewed: true } | { renewed: false; found: LockHolder };

/** The in-process fenced renewal (RENEW_LOCK_SQL). */
export async function renewLock(
  db: Queryable,
  jobId: string,
  expected: Date,
  next: Date,
): Promise<LockRenewal> {
  const result = await db.query<{ renewed: boolean; holder: string | null; held_at: Date | null }>(
    RENEW_LOCK_SQL,
    [jobId, expected, next],
  );
  const row = result.rows[0];
  if (row?.renewed) return { renewed: true };
  return { renewed: false, found: row ? { holder: row.holder, heldAt: row.held_at } : undefined };
}

/** Why a renewal found the lock gone, in words (the run's record and the lock-lost alert say it). */
export function lockTakenReason(found: LockHolder): string {
  if (!found) return "the job row was removed (its task was deleted from the config)";
  if (!found.holder) return "the lock was released (another instance found this one dead)";
  if (!found.heldAt)
    return `the lock was taken by instance "${found.holder}", whose run of the slot has ended since`;
  return `the lock was taken by instance "${found.holder}" (its lock from ${found.heldAt.toISOString()})`;
}

/**
 * Releases a lock, fenced on its value: a lock nobody renews any more (its owner is gone), or a
 * pre-locked job this instance will not run.
 */
export async function releaseLock(db: Queryable, jobId: string, lockedAt: Date): Promise<boolean> {
  return (await releaseLocks(db, [{ jobId, lockedAt }]))[0] ?? false;
}

/**
 * Several fenced releases in one statement (a stop frees every job claimed ahead of its slot, up
 * to a herd's worth; src/engine/jobRepository.ts batches them). Answers, per item in order,
 * whether its lock was released; no two items may be of the same job.
 */
export async function releaseLocks(
  db: Queryable,
  releases: readonly { jobId: string; lockedAt: Date }[],
): Promise<boolean[]> {
  if (releases.length === 0) return [];
  const result = await db.query<{ id: string }>(
    `UPDATE "${JOBS_TABLE}" AS j SET locked_at = NULL
       FROM jsonb_to_recordset($1::jsonb) AS v(id uuid, locked_at timestamptz)
      WHERE j.id = v.id AND date_trunc('milliseconds', j.locked_at) = v.locked_at
      RETURNING j.id`,
    [jsonRecords(releases.map((release) => ({ id: release.jobId, locked_at: jsonTime(release.lockedAt) })))],
  );
  const released = new Set(result.rows.map((row) => row.id));
  return releases.map((release) => released.has(release.jobId));
}

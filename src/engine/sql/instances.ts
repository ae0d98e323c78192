import { INSTANCES_TABLE, JOBS_TABLE, LIVENESS_LOCK_NAMESPACE, type Queryable } from "./tables.js";

/** Instance liveness (src/engine/liveness.ts): the session lock, the registry, dead instances' locks. */

/**
 * Takes the instance's liveness lock on the session it is called on, without waiting: false when
 * another live session holds it (the same instance id in another process, or this instance's
 * previous session not yet ended on the server).
 */
export async function tryLivenessLock(db: Queryable, instanceId: string): Promise<boolean> {
  const result = await db.query<{ held: boolean }>("SELECT pg_try_advisory_lock($1, hashtext($2)) AS held", [
    LIVENESS_LOCK_NAMESPACE,
    instanceId,
  ]);
  return result.rows[0]?.held === true;
}

/**
 * Registers an instance (after its lock is held: a registered instance without it is dead), with
 * the start time of the server its lock is held on.
 */
export async function registerInstance(db: Queryable, instanceId: string): Promise<void> {
  // instances registered on an earlier server run that have not registered again an hour into this
  // one are gone (a live one registers again as soon as it reconnects): forgotten
  await db.query(
    `DELETE FROM "${INSTANCES_TABLE}"
      WHERE server_started_at <> pg_postmaster_start_time() AND pg_postmaster_start_time() < now() - interval '1 hour'`,
  );
  await db.query(
    `INSERT INTO "${INSTANCES_TABLE}" (instance_id, started_at, server_started_at)
       VALUES ($1, now(), pg_postmaster_start_time())
       ON CONFLICT (instance_id) DO UPDATE SET started_at = now(), server_started_at = pg_postmaster_start_time()`,
    [instanceId],
  );
}

/** An instance that stops gives up its registration first, so nobody takes it for dead. */
export async function deregisterInstance(db: Queryable, instanceId: string): Promise<void> {
  await db.query(`DELETE FROM "${INSTANCES_TABLE}" WHERE instance_id = $1`, [instanceId]);
}

/**
 * The registered instances (other than `self`) whose session holds no liveness lock in this
 * database. Only those registered on this very server run (its start time): after a restart, or a
 * failover to a standby, every session was cut, and an instance counts again once it has taken its
 * lock on the new one.
 */
const DEAD_INSTANCES = `
  SELECT i.instance_id FROM "${INSTANCES_TABLE}" i
   WHERE i.instance_id <> $1
     AND i.server_started_at = pg_postmaster_start_time()
     AND NOT EXISTS (
       SELECT 1 FROM pg_locks l
        WHERE l.locktype = 'advisory' AND l.objsubid = 2 AND l.granted
          AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
          AND l.classid = ${LIVENESS_LOCK_NAMESPACE}::bigint::oid
          AND l.objid = (hashtext(i.instance_id)::bigint & 4294967295)::oid)`;

/** The check each instance makes about once a second: which registered instances are dead. */
export async function selectDeadInstances(db: Queryable, self: string): Promise<string[]> {
  const result = await db.query<{ instance_id: string }>(DEAD_INSTANCES, [self]);
  return result.rows.map((row) => row.instance_id);
}

export interface ReleasedJobRow {
  id: string;
  name: string;
  next_run_at: Date | null;
  priority: number;
  dead_instance: string;
}

/**
 * How a dead instance's lock is released: a run that had started (`last_run_at` after
 * `last_finished_at`) is due now, its start (`last_run_at`, `data.run`) kept, so the next lock
 * re-runs the same slot as a re-run, as after a lock expiry. A job only locked ahead keeps its slot.
 */
const RELEASE_DEAD_LOCK = `locked_at = NULL,
  next_run_at = CASE
    WHEN last_run_at IS NOT NULL AND (last_finished_at IS NULL OR last_run_at > last_finished_at)
    THEN now() ELSE next_run_at END`;

/**
 * Releases every lock held by the given instances, if they are still dead (checked again in the
 * same statement), and forgets them.
 */
export async function releaseDeadInstances(
  db: Queryable,
  self: string,
  suspects: string[],
): Promise<ReleasedJobRow[]> {
  const result = await db.query<ReleasedJobRow>(
    `WITH dead AS (
       SELECT instance_id FROM (${DEAD_INSTANCES}) d WHERE d.instance_id = ANY($2::text[])
     ), released AS (
       UPDATE "${JOBS_TABLE}" SET ${RELEASE_DEAD_LOCK}
        WHERE locked_at IS NOT NULL AND last_modified_by IN (SELECT instance_id FROM dead)
        RETURNING id, name, next_run_at, priority, last_modified_by AS dead_instance
     ), forgotten AS (
       DELETE FROM "${INSTANCES_TABLE}" WHERE instance_id IN (SELECT instance_id FROM dead)
     )
     SELECT id, name, next_run_at, priority, dead_instance FROM released`,
    [self, suspects],
  );
  return result.rows;
}

/**
 * At start, once this instance's liveness lock is held (so no other live process has its id):
 * locks still held under its id belong to its previous process, which died (an instance id kept
 * across restarts, e.g. a pod name). Released at once rather than after the lock lifetime.
 */
export async function releasePreviousLife(db: Queryable, self: string): Promise<ReleasedJobRow[]> {
  const result = await db.query<ReleasedJobRow>(
    `UPDATE "${JOBS_TABLE}" SET ${RELEASE_DEAD_LOCK}
      WHERE locked_at IS NOT NULL AND last_modified_by = $1
      RETURNING id, name, next_run_at, priority, last_modified_by AS dead_instance`,
    [self],
  );
  return result.rows;
}

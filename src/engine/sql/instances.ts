import {
  INSTANCE_DEATHS_TABLE,
  INSTANCES_TABLE,
  JOBS_TABLE,
  LIVENESS_LOCK_NAMESPACE,
  type Queryable,
} from "./tables.js";

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

/** What an instance says about itself in the registry (GET /instances, docs/operations.md "Instances"). */
export interface InstanceDetails {
  host: string;
  version: string;
  /** When the process started its engine (a reconnect of the liveness session keeps it). */
  startedAt: Date;
  /** Its maxConcurrency. */
  concurrency: number;
}

/**
 * Registers an instance (after its lock is held: a registered instance without it is dead), with
 * the start time of the server its lock is held on, and what it says about itself.
 */
export async function registerInstance(
  db: Queryable,
  instanceId: string,
  details?: InstanceDetails,
): Promise<void> {
  // instances registered on an earlier server run that have not registered again an hour into this
  // one are gone (a live one registers again as soon as it reconnects): forgotten
  await db.query(
    `DELETE FROM "${INSTANCES_TABLE}"
      WHERE server_started_at <> pg_postmaster_start_time() AND pg_postmaster_start_time() < now() - interval '1 hour'`,
  );
  await db.query(
    `INSERT INTO "${INSTANCES_TABLE}" (instance_id, started_at, server_started_at, last_seen_at,
                                        host, version, process_started_at, concurrency)
       VALUES ($1, now(), pg_postmaster_start_time(), now(), $2, $3, $4, $5)
       ON CONFLICT (instance_id) DO UPDATE SET started_at = now(), server_started_at = pg_postmaster_start_time(),
         last_seen_at = now(), host = EXCLUDED.host, version = EXCLUDED.version,
         process_started_at = EXCLUDED.process_started_at, concurrency = EXCLUDED.concurrency`,
    [
      instanceId,
      details?.host ?? null,
      details?.version ?? null,
      details?.startedAt ?? null,
      details?.concurrency ?? null,
    ],
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

/**
 * The check each instance makes about once a second: which registered instances are dead. The same
 * statement stamps the checker's own `last_seen_at` (GET /instances): one statement per check, as
 * before, so the idle load stays one transaction per check (docs/benchmarks.md).
 */
export async function selectDeadInstances(db: Queryable, self: string): Promise<string[]> {
  const result = await db.query<{ instance_id: string }>(
    `WITH seen AS (UPDATE "${INSTANCES_TABLE}" SET last_seen_at = now() WHERE instance_id = $1)
     ${DEAD_INSTANCES}`,
    [self],
  );
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

/** Deaths are kept this long for GET /instances and the timeline, then pruned by the next death. */
const DEATHS_KEPT = "7 days";

/**
 * Releases every lock held by the given instances, if they are still dead (checked again in the
 * same statement), and forgets them; each death is recorded (INSTANCE_DEATHS_TABLE) with the
 * tasks whose runs were handed over, for GET /instances and the timeline's mark.
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
       RETURNING instance_id, host, version, process_started_at, concurrency, last_seen_at
     ), recorded AS (
       INSERT INTO "${INSTANCE_DEATHS_TABLE}"
         (instance_id, host, version, process_started_at, concurrency, last_seen_at, died_at, seen_by, handed_over)
       SELECT f.instance_id, f.host, f.version, f.process_started_at, f.concurrency, f.last_seen_at, now(), $1,
              coalesce((SELECT array_agg(r.name ORDER BY r.name) FROM released r WHERE r.dead_instance = f.instance_id), '{}')
         FROM forgotten f
     ), pruned AS (
       DELETE FROM "${INSTANCE_DEATHS_TABLE}" WHERE died_at < now() - interval '${DEATHS_KEPT}'
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

export interface InstanceRow {
  instance_id: string;
  host: string | null;
  version: string | null;
  started_at: Date;
  process_started_at: Date | null;
  last_seen_at: Date | null;
  concurrency: number | null;
  runs_in_progress: number;
  /** "live": its liveness lock is held; "dead": registered without it (not yet confirmed by a check). */
  state: "live" | "dead";
}

/**
 * The registered instances with their state (their liveness lock held or not, as DEAD_INSTANCES
 * tells it) and their runs in progress, counted from the job rows they hold: a run started and not
 * finished under their lock. Not a hot path (GET /instances): one scan of the job rows.
 */
export async function selectInstances(db: Queryable): Promise<InstanceRow[]> {
  const result = await db.query<InstanceRow>(
    `SELECT i.instance_id, i.host, i.version, i.started_at, i.process_started_at, i.last_seen_at, i.concurrency,
            (SELECT count(*)::int FROM "${JOBS_TABLE}" j
              WHERE j.last_modified_by = i.instance_id AND j.locked_at IS NOT NULL AND j.last_run_at IS NOT NULL
                AND (j.last_finished_at IS NULL OR j.last_run_at > j.last_finished_at)) AS runs_in_progress,
            CASE WHEN i.instance_id IN (SELECT instance_id FROM (${DEAD_INSTANCES}) d) THEN 'dead' ELSE 'live' END AS state
       FROM "${INSTANCES_TABLE}" i
      ORDER BY i.instance_id`,
    [""],
  );
  return result.rows;
}

export interface InstanceDeathRow {
  instance_id: string;
  host: string | null;
  version: string | null;
  process_started_at: Date | null;
  concurrency: number | null;
  last_seen_at: Date | null;
  died_at: Date;
  /** The instance whose check confirmed the death and released its locks. */
  seen_by: string;
  /** The tasks whose runs it had started were handed over (re-run elsewhere). */
  handed_over: string[];
}

/** Deaths recorded since `since`, newest first (GET /instances, the timeline's marks). */
export async function selectInstanceDeaths(
  db: Queryable,
  range: { from: Date; to?: Date; limit: number },
): Promise<InstanceDeathRow[]> {
  const result = await db.query<InstanceDeathRow>(
    `SELECT instance_id, host, version, process_started_at, concurrency, last_seen_at, died_at, seen_by, handed_over
       FROM "${INSTANCE_DEATHS_TABLE}"
      WHERE died_at >= $1 AND ($2::timestamptz IS NULL OR died_at < $2)
      ORDER BY died_at DESC LIMIT $3`,
    [range.from, range.to ?? null, range.limit],
  );
  return result.rows;
}

export const CREATE_INSTANCE_DEATHS = `
  CREATE TABLE IF NOT EXISTS "${INSTANCE_DEATHS_TABLE}" (
    id                 BIGSERIAL PRIMARY KEY,
    instance_id        TEXT NOT NULL,
    host               TEXT,
    version            TEXT,
    process_started_at TIMESTAMPTZ,
    concurrency        INTEGER,
    last_seen_at       TIMESTAMPTZ,
    died_at            TIMESTAMPTZ NOT NULL,
    seen_by            TEXT NOT NULL,
    handed_over        TEXT[] NOT NULL DEFAULT '{}'
  )`;

/** The columns an instance fills in at registration and at each liveness check (schema step 8). */
export const ADD_INSTANCE_COLUMNS = `
  ALTER TABLE "${INSTANCES_TABLE}"
    ADD COLUMN IF NOT EXISTS host TEXT,
    ADD COLUMN IF NOT EXISTS version TEXT,
    ADD COLUMN IF NOT EXISTS process_started_at TIMESTAMPTZ,
    ADD COLUMN IF NOT EXISTS concurrency INTEGER,
    ADD COLUMN IF NOT EXISTS last_seen_at TIMESTAMPTZ`;

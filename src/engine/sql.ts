import type { ClientBase, Pool } from "pg";

/**
 * The engine's own statements against Agenda's tables, one named, parameterised builder each.
 * Agenda's repository does the scheduling and locking; these are the reads and in-place
 * updates it has no API for.
 */

export const JOBS_TABLE = "agenda_jobs";
export const LOGS_TABLE = "agenda_logs";

/** pg_advisory_lock keys: arbitrary constants, unique to cronwarden ("cw" + purpose). */
export const SCHEMA_LOCK_KEY = 0x6377_0001;
export const RECONCILE_LOCK_KEY = 0x6377_0002;

export interface JobRow {
  id: string;
  name: string;
  disabled: boolean;
  repeat_interval: string | null;
  repeat_timezone: string | null;
  next_run_at: Date | null;
  locked_at: Date | null;
  last_run_at: Date | null;
  last_finished_at: Date | null;
  fail_count: number | null;
  fail_reason: string | null;
  last_modified_by: string | null;
  /** `data.policy` (src/core/policies/catchUpAtStart.ts). */
  policy: unknown;
}

type Queryable = Pool | ClientBase;

export async function selectTaskJobs(db: Queryable): Promise<JobRow[]> {
  const result = await db.query<JobRow>(
    `SELECT id, name, disabled, repeat_interval, repeat_timezone, next_run_at, locked_at,
            last_run_at, last_finished_at, fail_count, fail_reason, last_modified_by,
            data->'policy' AS policy
       FROM "${JOBS_TABLE}" WHERE type = 'single' ORDER BY name`,
  );
  return result.rows;
}

export async function selectJobFlags(
  db: Queryable,
  name: string,
): Promise<{ disabled: boolean } | undefined> {
  const result = await db.query<{ disabled: boolean }>(
    `SELECT disabled FROM "${JOBS_TABLE}" WHERE name = $1 AND type = 'single'`,
    [name],
  );
  return result.rows[0];
}

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

export interface RunGuardRow {
  disabled: boolean;
  repeat_interval: string | null;
  repeat_timezone: string | null;
}

/** Read just before a handler starts: has the job been disabled or re-timed since Agenda locked it? */
export async function selectRunGuard(db: Queryable, jobId: string): Promise<RunGuardRow | undefined> {
  const result = await db.query<RunGuardRow>(
    `SELECT disabled, repeat_interval, repeat_timezone FROM "${JOBS_TABLE}" WHERE id = $1`,
    [jobId],
  );
  return result.rows[0];
}

/*
 * The reconciler's two writes leave `last_modified_by` alone: Agenda sets it to the instance that
 * locks and runs the job, which is how status tells where a run is going on. Who changed a
 * schedule is in the audit trail.
 */

/**
 * The in-place schedule change: same row (id, lock, history), new cron, timezone and next run.
 * `nextRunAt` was computed from `reference`; it is written only if no run started after that
 * (`last_run_at`), else a run of the very slot `nextRunAt` names may have started meanwhile and the
 * slot would run twice. Then nothing is written and the caller computes again from the start
 * returned.
 */
export async function updateSchedule(
  db: Queryable,
  change: { name: string; cron: string; timezone: string; nextRunAt: Date; reference: Date },
): Promise<{ updated: true } | { updated: false; startedAt: Date | null; exists: boolean }> {
  const result = await db.query(
    `UPDATE "${JOBS_TABLE}" SET repeat_interval = $2, repeat_timezone = $3, next_run_at = $4,
            data = CASE WHEN data->'policy' ? 'at' THEN jsonb_set(data, '{policy}', (data->'policy') - 'at') ELSE data END
      WHERE name = $1 AND type = 'single' AND (last_run_at IS NULL OR last_run_at <= $5)`,
    [change.name, change.cron, change.timezone, change.nextRunAt, change.reference],
  );
  if ((result.rowCount ?? 0) > 0) return { updated: true };
  const row = await db.query<{ last_run_at: Date | null }>(
    `SELECT last_run_at FROM "${JOBS_TABLE}" WHERE name = $1 AND type = 'single'`,
    [change.name],
  );
  return { updated: false, startedAt: row.rows[0]?.last_run_at ?? null, exists: row.rows.length > 0 };
}

export async function setDisabled(db: Queryable, name: string, disabled: boolean): Promise<number> {
  const result = await db.query(
    `UPDATE "${JOBS_TABLE}" SET disabled = $2 WHERE name = $1 AND type = 'single'`,
    [name, disabled],
  );
  return result.rowCount ?? 0;
}

/** Stores a task's policies in its job row's data (`data.policy`, merged); the schedule and next run stay. */
export async function setPolicy(db: Queryable, name: string, policy: unknown): Promise<number> {
  const result = await db.query(
    `UPDATE "${JOBS_TABLE}" SET data = coalesce(data, '{}'::jsonb) || jsonb_build_object('policy',
            coalesce(data->'policy', '{}'::jsonb) || $2::jsonb)
      WHERE name = $1 AND type = 'single'`,
    [name, JSON.stringify(policy)],
  );
  return result.rowCount ?? 0;
}

/** Moves an idle job's next run (a jitter change), only if nothing changed it meanwhile. */
export async function retimeIdle(db: Queryable, name: string, from: Date, to: Date): Promise<number> {
  const result = await db.query(
    `UPDATE "${JOBS_TABLE}" SET next_run_at = $3
      WHERE name = $1 AND type = 'single' AND locked_at IS NULL AND next_run_at = $2`,
    [name, from, to],
  );
  return result.rowCount ?? 0;
}

/**
 * Arms an `at:` one-shot (src/core/policies/schedule.ts atSchedule): no repeat interval (Agenda
 * runs the job once and leaves it without a next run), the time as the next run and in
 * `data.policy.at`. A changed time re-arms a one-shot that has run.
 */
export async function armOneShot(
  db: Queryable,
  change: { name: string; timezone: string; at: Date },
): Promise<number> {
  const result = await db.query(
    `UPDATE "${JOBS_TABLE}" SET repeat_interval = NULL, repeat_timezone = $2, next_run_at = $3,
            data = coalesce(data, '{}'::jsonb) || jsonb_build_object('policy',
              coalesce(data->'policy', '{}'::jsonb) || jsonb_build_object('at', $4::text))
      WHERE name = $1 AND type = 'single'`,
    [change.name, change.timezone, change.at, change.at.toISOString()],
  );
  return result.rowCount ?? 0;
}

export interface RunLogRow {
  id: string;
  timestamp: Date;
  event: string;
  job_name: string;
  message: string;
  duration: number | null;
  error: string | null;
  agenda_name: string | null;
  meta: Record<string, unknown> | null;
}

/** Finished attempts (Agenda's success/fail rows and our failed-then-retried rows) of one task, newest first. */
export async function selectRuns(db: Queryable, name: string, limit: number): Promise<RunLogRow[]> {
  const result = await db.query<RunLogRow>(
    `SELECT id, timestamp, event, job_name, message, duration, error, agenda_name, meta
       FROM "${LOGS_TABLE}"
      WHERE job_name = $1 AND event IN ('success', 'fail', 'retry') AND meta ? 'outcome'
      ORDER BY timestamp DESC LIMIT $2`,
    [name, limit],
  );
  return result.rows;
}

export interface RunSummaryRow {
  job_name: string;
  last_outcome: string | null;
  last_error: string | null;
  recent_outcomes: string[] | null;
  consecutive_failures: number;
}

/** A failure streak is counted up to this many slots (one index range per task, however long it failed). */
const STREAK_CAP = 10_000;

/**
 * Per task job, counted in slots (one final `success`/`fail` row per slot; failed attempts that were
 * retried are `retry` rows and do not count): the latest slot's outcome and error, the outcomes of
 * the last `recent` slots, newest first, and the failed slots since the last succeeded one (skips
 * neither count nor break the streak). All from `agenda_logs` in one statement, so the figures
 * agree with each other: the job row's `fail_count` is saved separately and can lag the log.
 */
export async function selectRunSummaries(db: Queryable, recent: number): Promise<RunSummaryRow[]> {
  const result = await db.query<RunSummaryRow>(
    `SELECT j.name AS job_name, outcomes.list[1] AS last_outcome, last_outcome.error AS last_error,
            outcomes.list AS recent_outcomes, streak.failed AS consecutive_failures
       FROM "${JOBS_TABLE}" j
       LEFT JOIN LATERAL (
         SELECT array_agg(o.outcome ORDER BY o.timestamp DESC) AS list FROM (
           SELECT meta->>'outcome' AS outcome, timestamp FROM "${LOGS_TABLE}" l
            WHERE l.job_name = j.name AND l.event IN ('success', 'fail') AND l.meta ? 'outcome'
            ORDER BY l.timestamp DESC LIMIT $1) o) outcomes ON true
       LEFT JOIN LATERAL (
         SELECT error FROM "${LOGS_TABLE}" l
          WHERE l.job_name = j.name AND l.event IN ('success', 'fail') AND l.meta ? 'outcome'
          ORDER BY l.timestamp DESC LIMIT 1) last_outcome ON true
       LEFT JOIN LATERAL (
         SELECT count(*)::int AS failed FROM (
           SELECT 1 FROM "${LOGS_TABLE}" l
            WHERE l.job_name = j.name AND l.event = 'fail' AND l.meta->>'outcome' = 'failed'
              AND l.timestamp > coalesce(
                (SELECT s.timestamp FROM "${LOGS_TABLE}" s
                  WHERE s.job_name = j.name AND s.event = 'success' AND s.meta->>'outcome' = 'succeeded'
                  ORDER BY s.timestamp DESC LIMIT 1), '-infinity')
            LIMIT ${STREAK_CAP}) f) streak ON true
      WHERE j.type = 'single'`,
    [recent],
  );
  return result.rows;
}

/**
 * Run-now: due at once, unless a run holds the lock or the task is disabled (0 rows). `by` is who
 * asked (a token's name), `instance` the instance that took the request.
 */
export async function requestManualRun(
  db: Queryable,
  name: string,
  request: { by: string; instance: string },
): Promise<{ id: string; next_run_at: Date } | undefined> {
  const result = await db.query<{ id: string; next_run_at: Date }>(
    `UPDATE "${JOBS_TABLE}"
        SET next_run_at = now(),
            data = coalesce(data, '{}'::jsonb) || jsonb_build_object('manualRun',
              jsonb_build_object('requestedAt', now(), 'by', $2::text, 'instance', $3::text))
      WHERE name = $1 AND type = 'single' AND locked_at IS NULL AND disabled = FALSE
      RETURNING id, next_run_at`,
    [name, request.by, request.instance],
  );
  return result.rows[0];
}

export async function clearManualRun(db: Queryable, jobId: string): Promise<void> {
  await db.query(`UPDATE "${JOBS_TABLE}" SET data = data - 'manualRun' WHERE id = $1`, [jobId]);
}

export interface OverdueRow {
  id: string;
  name: string;
  next_run_at: Date | null;
  locked_at: Date | null;
  priority: number;
}

/**
 * Enabled jobs that should have started and did not: next run past by more than `graceMs` with no
 * live lock (none, or one older than the lock lifetime), or no next run at all.
 */
export async function selectOverdueJobs(
  db: Queryable,
  names: string[],
  graceMs: number,
  lockLifetimeMs: number,
): Promise<OverdueRow[]> {
  const result = await db.query<OverdueRow>(
    `SELECT id, name, next_run_at, locked_at, priority FROM "${JOBS_TABLE}"
      WHERE type = 'single' AND disabled = FALSE AND name = ANY($1::text[])
        AND ((next_run_at IS NULL AND NOT coalesce(data->'policy' ? 'at', false))
             OR next_run_at < now() - make_interval(secs => $2::double precision / 1000))
        AND (locked_at IS NULL OR locked_at < now() - make_interval(secs => $3::double precision / 1000))`,
    [names, graceMs, lockLifetimeMs],
  );
  return result.rows;
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
 * Whether a slot of a task already has its outcome row: a run that died after recording its end
 * but before saving it in the job row finished its slot. Served by the timeline's index on
 * (job_name, meta->>'scheduledAt').
 */
export async function slotHasOutcome(db: Queryable, taskName: string, slot: Date): Promise<boolean> {
  const result = await db.query(
    `SELECT 1 FROM "${LOGS_TABLE}"
      WHERE job_name = $1 AND meta->>'scheduledAt' = $2 AND event IN ('success', 'fail')
        AND meta->>'outcome' IN ('succeeded', 'failed', 'skipped')
      LIMIT 1`,
    [taskName, slot.toISOString()],
  );
  return (result.rowCount ?? 0) > 0;
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

/** The watchdog's fenced renewal: moves the lock only if the row still holds the time we wrote. */
export async function renewLock(db: Queryable, jobId: string, expected: Date, next: Date): Promise<boolean> {
  const result = await db.query(
    `UPDATE "${JOBS_TABLE}" SET locked_at = $3 WHERE id = $1 AND date_trunc('milliseconds', locked_at) = $2`,
    [jobId, expected, next],
  );
  return result.rowCount === 1;
}

export interface StartLogRow {
  timestamp: Date;
  agenda_name: string | null;
  meta: Record<string, unknown> | null;
}

/** The last recorded start of a job: the run that a re-run after a crash repeats. */
export async function selectLastStart(
  db: Queryable,
  jobId: string,
  before: Date,
): Promise<StartLogRow | undefined> {
  const result = await db.query<StartLogRow>(
    `SELECT timestamp, agenda_name, meta FROM "${LOGS_TABLE}"
      WHERE job_id = $1 AND event = 'start' AND timestamp < $2 ORDER BY timestamp DESC LIMIT 1`,
    [jobId, before],
  );
  return result.rows[0];
}

/**
 * Claims the report of a missed slot: true for exactly one instance per (job, slot), so that
 * several instances noticing the same missed slot raise one alert between them.
 */
export async function claimMissedSlotReport(db: Queryable, jobId: string, slot: string): Promise<boolean> {
  const result = await db.query(
    `UPDATE "${JOBS_TABLE}" SET data = coalesce(data, '{}'::jsonb) || jsonb_build_object('missedSlotReported', $2::text)
      WHERE id = $1 AND (data->>'missedSlotReported') IS DISTINCT FROM $2::text`,
    [jobId, slot],
  );
  return result.rowCount === 1;
}

/** Batch size of the run-log pruning: short transactions on a big table. */
const PRUNE_BATCH = 5_000;
export const RETENTION_LOCK_KEY = 0x6377_0003;

/**
 * Deletes run-log rows older than `before`, in batches, if no other instance is doing it (a
 * try-lock, not a wait). Returns the number of rows deleted, or null when another instance held it.
 */
export async function pruneRunLog(pool: Pool, before: Date): Promise<number | null> {
  const client = await pool.connect();
  try {
    const { rows } = await client.query<{ locked: boolean }>("SELECT pg_try_advisory_lock($1) AS locked", [
      RETENTION_LOCK_KEY,
    ]);
    if (!rows[0]?.locked) return null;
    try {
      let total = 0;
      for (;;) {
        const result = await client.query(
          `DELETE FROM "${LOGS_TABLE}" WHERE id IN (SELECT id FROM "${LOGS_TABLE}" WHERE timestamp < $1 LIMIT ${PRUNE_BATCH})`,
          [before],
        );
        total += result.rowCount ?? 0;
        if ((result.rowCount ?? 0) < PRUNE_BATCH) return total;
      }
    } finally {
      await client.query("SELECT pg_advisory_unlock($1)", [RETENTION_LOCK_KEY]);
    }
  } finally {
    client.release();
  }
}

// ---- instance liveness (src/engine/liveness.ts)

/** Every instance that has taken part in liveness since it last stopped (its lock is its life). */
export const INSTANCES_TABLE = "cronwarden_instances";
/**
 * The first key of an instance's liveness lock (the two-key form of pg_advisory_lock); the second
 * is hashtext(instance id). The single-key locks above show in pg_locks with objsubid 1, these
 * with objsubid 2, so they never meet.
 */
export const LIVENESS_LOCK_NAMESPACE = 0x6377_0004;

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

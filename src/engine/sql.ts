import type { Pool, PoolClient } from "pg";

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
}

type Queryable = Pool | PoolClient;

export async function selectTaskJobs(db: Queryable): Promise<JobRow[]> {
  const result = await db.query<JobRow>(
    `SELECT id, name, disabled, repeat_interval, repeat_timezone, next_run_at, locked_at,
            last_run_at, last_finished_at, fail_count, fail_reason, last_modified_by
       FROM "${JOBS_TABLE}" WHERE type = 'single' ORDER BY name`,
  );
  return result.rows;
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

/** The in-place schedule change: same row (id, lock, history), new cron, timezone and next run. */
export async function updateSchedule(
  db: Queryable,
  change: { name: string; cron: string; timezone: string; nextRunAt: Date; modifiedBy: string },
): Promise<number> {
  const result = await db.query(
    `UPDATE "${JOBS_TABLE}"
        SET repeat_interval = $2, repeat_timezone = $3, next_run_at = $4, last_modified_by = $5
      WHERE name = $1 AND type = 'single'`,
    [change.name, change.cron, change.timezone, change.nextRunAt, change.modifiedBy],
  );
  return result.rowCount ?? 0;
}

export async function setDisabled(
  db: Queryable,
  name: string,
  disabled: boolean,
  modifiedBy: string,
): Promise<number> {
  const result = await db.query(
    `UPDATE "${JOBS_TABLE}" SET disabled = $2, last_modified_by = $3 WHERE name = $1 AND type = 'single'`,
    [name, disabled, modifiedBy],
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

/** Finished runs (Agenda's success/fail rows) of one task, newest first. */
export async function selectRuns(db: Queryable, name: string, limit: number): Promise<RunLogRow[]> {
  const result = await db.query<RunLogRow>(
    `SELECT id, timestamp, event, job_name, message, duration, error, agenda_name, meta
       FROM "${LOGS_TABLE}"
      WHERE job_name = $1 AND event IN ('success', 'fail') AND meta ? 'scheduledAt'
      ORDER BY timestamp DESC LIMIT $2`,
    [name, limit],
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

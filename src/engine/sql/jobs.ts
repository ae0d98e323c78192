import { FAILURE_STREAK_KEY, PAUSE_DATA_KEY } from "../../core/policies/pauseOnFailure.js";
import { JOBS_TABLE, type Queryable } from "./tables.js";

/**
 * Reads of the job rows (status, the check before a handler) and the in-place changes Agenda has
 * no API for: a re-timing, enabling and disabling, a run-now request.
 */

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
  /** `data.pausedByFailure` (src/core/policies/pauseOnFailure.ts). */
  paused: unknown;
  /** Only the dependency a downstream row keeps (data.after), not the whole data. */
  data: { after?: unknown } | null;
}

/** Every task's job row, or only those of `names`. */
export async function selectTaskJobs(db: Queryable, names?: readonly string[]): Promise<JobRow[]> {
  const result = await db.query<JobRow>(
    `SELECT id, name, disabled, repeat_interval, repeat_timezone, next_run_at, locked_at,
            last_run_at, last_finished_at, fail_count, fail_reason, last_modified_by,
            data->'policy' AS policy, data->'${PAUSE_DATA_KEY}' AS paused,
            CASE WHEN data ? 'after' THEN jsonb_build_object('after', data->'after') END AS data
       FROM "${JOBS_TABLE}" WHERE type = 'single' ${names ? "AND name = ANY($1::text[])" : ""} ORDER BY name`,
    names ? [names] : [],
  );
  return result.rows;
}

/** The text of a task row's columns the reconcile planner reads (selectTaskJobs as taskJobOfRow maps it). */
const PLANNED_ROW_TEXT = `json_build_array(name, disabled, repeat_interval, repeat_timezone, next_run_at IS NULL,
  data->'policy', data->'${PAUSE_DATA_KEY}', data->'after')::text`;

/**
 * A digest of rows' planned columns: their count and two sums of 64-bit hashes of each row's
 * text. A sum, not a hash of the rows in order: the digest of every row but some is computable
 * from the digest of all and of those (src/reconcile/rowsDigest.ts), so a reconcile of a few
 * rows reads the digest of every row once, after its writes (src/reconcile/configReconciler.ts).
 */
const DIGEST_OF = (filter: string) =>
  `count(*) ${filter} || ':' || coalesce(sum(h0) ${filter}, 0) || ':' || coalesce(sum(h1) ${filter}, 0)`;
const HASHED_ROWS = `SELECT name, hashtextextended(t, 0) AS h0, hashtextextended(t, 1) AS h1
   FROM (SELECT name, ${PLANNED_ROW_TEXT} AS t FROM "${JOBS_TABLE}" WHERE type = 'single'`;

/**
 * The digest of every task row's planned columns (the schedule, the flags, the policies, the
 * pause, the dependency, and whether a next run is set), computed by the database: an
 * anti-entropy pass compares it with the last converged pass's instead of reading and planning
 * every row again (src/reconcile/configReconciler.ts).
 */
export async function selectPlannedColumnsDigest(db: Queryable): Promise<string> {
  const result = await db.query<{ digest: string }>(
    `SELECT ${DIGEST_OF("")} AS digest FROM (${HASHED_ROWS}) AS rows) AS hashed`,
  );
  return result.rows[0]?.digest ?? "";
}

/** The digest of the named task rows alone (by the name index) and, with `all`, of every task row too. */
export async function selectPlannedDigests(
  db: Queryable,
  names: readonly string[],
  all: boolean,
): Promise<{ all?: string; named: string }> {
  const named = DIGEST_OF("FILTER (WHERE name = ANY($1::text[]))");
  const result = all
    ? await db.query<{ all_rows: string; named: string }>(
        `SELECT ${DIGEST_OF("")} AS all_rows, ${named} AS named FROM (${HASHED_ROWS}) AS rows) AS hashed`,
        [names],
      )
    : await db.query<{ named: string }>(
        `SELECT ${named} AS named FROM (${HASHED_ROWS} AND name = ANY($1::text[])) AS rows) AS hashed`,
        [names],
      );
  const row = result.rows[0] as { all_rows?: string; named: string } | undefined;
  return { ...(row?.all_rows === undefined ? {} : { all: row.all_rows }), named: row?.named ?? "" };
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

/**
 * Run-now: due at once, unless a run holds the lock or the task is disabled (0 rows). `by` is who
 * asked (a token's name), `instance` the instance that took the request.
 */
export async function requestManualRun(
  db: Queryable,
  name: string,
  request: { by: string; instance: string; withDownstream?: boolean },
): Promise<{ id: string; next_run_at: Date } | undefined> {
  const result = await db.query<{ id: string; next_run_at: Date }>(
    `UPDATE "${JOBS_TABLE}"
        SET next_run_at = now(),
            data = coalesce(data, '{}'::jsonb) || jsonb_build_object('manualRun',
              jsonb_build_object('requestedAt', now(), 'by', $2::text, 'instance', $3::text,
                'withDownstream', $4::boolean))
      WHERE name = $1 AND type = 'single' AND locked_at IS NULL AND disabled = FALSE
      RETURNING id, next_run_at`,
    [name, request.by, request.instance, request.withDownstream === true],
  );
  return result.rows[0];
}

export async function clearManualRun(db: Queryable, jobId: string): Promise<void> {
  await db.query(`UPDATE "${JOBS_TABLE}" SET data = data - 'manualRun' WHERE id = $1`, [jobId]);
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

/**
 * Clears a task's pause by failure (and its failure streak): enabled again (`enabled`), or left
 * disabled when the config disables it. Only a paused row matches: a resume is applied once, and
 * a row that is not paused is never touched. Returns the pause mark it cleared.
 */
export async function clearPause(
  db: Queryable,
  name: string,
  enabled: boolean,
): Promise<{ id: string; paused: unknown; next_run_at: Date | null } | undefined> {
  const result = await db.query<{ id: string; paused: unknown; next_run_at: Date | null }>(
    `UPDATE "${JOBS_TABLE}" AS job SET disabled = NOT $2::boolean,
            data = job.data - '${PAUSE_DATA_KEY}' - '${FAILURE_STREAK_KEY}'
       FROM (SELECT id, data->'${PAUSE_DATA_KEY}' AS paused FROM "${JOBS_TABLE}"
              WHERE name = $1 AND type = 'single' AND data ? '${PAUSE_DATA_KEY}' FOR UPDATE) AS before
      WHERE job.id = before.id
      RETURNING job.id, before.paused, job.next_run_at`,
    [name, enabled],
  );
  return result.rows[0];
}

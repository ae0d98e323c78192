import { JOBS_TABLE, type Queryable } from "./tables.js";

/**
 * The reconciler's writes of many job rows in one statement each (src/engine/jobBatchWrites.ts):
 * the same rows and columns as the one-row writes (Agenda's `single` upsert, sql/jobs.ts
 * updateSchedule and setDisabled), for a batch of tasks, from arrays (`unnest`). A start with
 * 10,000 new tasks made 10,000 round trips, each its own commit.
 */

export interface NewJobRow {
  name: string;
  priority: number;
  nextRunAt: Date;
  cron: string;
  timezone: string;
  disabled: boolean;
}

/**
 * Agenda's save of a new `single` job (@agendajs/postgres-backend saveJob: insert, or update the
 * row of that name), for many rows: the same columns and the same conflict rule. Every next run
 * here is ahead of now, so the conflict branch writes the new one (Agenda keeps a stored next run
 * only when the new one is already due). Returns the rows written.
 */
export async function insertSingleJobs(
  db: Queryable,
  rows: readonly NewJobRow[],
  lastModifiedBy: string | null,
): Promise<{ id: string; name: string; next_run_at: Date; priority: number }[]> {
  const result = await db.query<{ id: string; name: string; next_run_at: Date; priority: number }>(
    `INSERT INTO "${JOBS_TABLE}" (
            name, priority, next_run_at, type, repeat_timezone,
            repeat_interval, data, repeat_at, disabled, fork, last_modified_by,
            start_date, end_date, skip_days)
     SELECT name, priority, next_run_at, 'single', repeat_timezone,
            repeat_interval, NULL, NULL, disabled, FALSE, $7,
            NULL, NULL, NULL
       FROM unnest($1::text[], $2::int[], $3::timestamptz[], $4::text[], $5::text[], $6::boolean[])
            AS given(name, priority, next_run_at, repeat_interval, repeat_timezone, disabled)
     ON CONFLICT ((name)) WHERE type = 'single'
     DO UPDATE SET
            priority = EXCLUDED.priority,
            next_run_at = EXCLUDED.next_run_at,
            repeat_timezone = EXCLUDED.repeat_timezone,
            repeat_interval = EXCLUDED.repeat_interval,
            data = EXCLUDED.data,
            repeat_at = EXCLUDED.repeat_at,
            disabled = EXCLUDED.disabled,
            fork = EXCLUDED.fork,
            last_modified_by = EXCLUDED.last_modified_by,
            start_date = EXCLUDED.start_date,
            end_date = EXCLUDED.end_date,
            skip_days = EXCLUDED.skip_days
     RETURNING id, name, next_run_at, priority`,
    [
      rows.map((row) => row.name),
      rows.map((row) => row.priority),
      rows.map((row) => row.nextRunAt),
      rows.map((row) => row.cron),
      rows.map((row) => row.timezone),
      rows.map((row) => row.disabled),
      lastModifiedBy,
    ],
  );
  return result.rows;
}

export interface ScheduleChange {
  name: string;
  cron: string;
  timezone: string;
  nextRunAt: Date;
}

/**
 * sql/jobs.ts updateSchedule for many rows computed from one `reference`: each row is written
 * only if no run of it started after the reference. Returns the names written; a name missing
 * from the answer was not (no row, or a run started meanwhile): the caller changes it alone.
 */
export async function updateSchedules(
  db: Queryable,
  changes: readonly ScheduleChange[],
  reference: Date,
): Promise<Set<string>> {
  const result = await db.query<{ name: string }>(
    `UPDATE "${JOBS_TABLE}" AS job
        SET repeat_interval = given.cron, repeat_timezone = given.timezone, next_run_at = given.next_run_at,
            data = CASE WHEN job.data->'policy' ? 'at'
                        THEN jsonb_set(job.data, '{policy}', (job.data->'policy') - 'at') ELSE job.data END
       FROM unnest($1::text[], $2::text[], $3::text[], $4::timestamptz[])
            AS given(name, cron, timezone, next_run_at)
      WHERE job.name = given.name AND job.type = 'single'
        AND (job.last_run_at IS NULL OR job.last_run_at <= $5)
      RETURNING job.name`,
    [
      changes.map((change) => change.name),
      changes.map((change) => change.cron),
      changes.map((change) => change.timezone),
      changes.map((change) => change.nextRunAt),
      reference,
    ],
  );
  return new Set(result.rows.map((row) => row.name));
}

/** sql/jobs.ts setDisabled for many rows. Returns the names written. */
export async function setDisabledMany(
  db: Queryable,
  changes: readonly { name: string; disabled: boolean }[],
): Promise<Set<string>> {
  const result = await db.query<{ name: string }>(
    `UPDATE "${JOBS_TABLE}" AS job SET disabled = given.disabled
       FROM unnest($1::text[], $2::boolean[]) AS given(name, disabled)
      WHERE job.name = given.name AND job.type = 'single'
      RETURNING job.name`,
    [changes.map((change) => change.name), changes.map((change) => change.disabled)],
  );
  return new Set(result.rows.map((row) => row.name));
}

import type { Pool } from "pg";
import { withAdvisoryTryLock } from "../advisoryLock.js";
import {
  DEPENDENCY_WAITS_TABLE,
  JOBS_TABLE,
  LOGS_TABLE,
  type Queryable,
  RETENTION_LOCK_KEY,
} from "./tables.js";

/** The run log (Agenda's job log table): history, status figures, a slot's outcome, pruning. */

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
 * Whether the run that died had recorded its slot's outcome: a run that died after recording its
 * end but before saving it in the job row finished its slot. Only rows written since that run
 * started count: an earlier outcome of the same slot (a pre-locked attempt skipped for a re-timing
 * whose new schedule has the same slot, then run again) is not that run's. Served by the
 * timeline's index on (job_name, meta->>'scheduledAt').
 */
export async function slotHasOutcome(
  db: Queryable,
  taskName: string,
  slot: Date,
  since: Date,
): Promise<boolean> {
  const result = await db.query(
    `SELECT 1 FROM "${LOGS_TABLE}"
      WHERE job_name = $1 AND meta->>'scheduledAt' = $2 AND event IN ('success', 'fail')
        AND meta->>'outcome' IN ('succeeded', 'failed', 'skipped') AND timestamp >= $3
      LIMIT 1`,
    [taskName, slot.toISOString(), since],
  );
  return (result.rowCount ?? 0) > 0;
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

/** Batch size of the run-log pruning: short transactions on a big table. */
const PRUNE_BATCH = 5_000;

/**
 * Deletes run-log rows older than `before`, in batches, if no other instance is doing it (a
 * try-lock, not a wait). Returns the number of rows deleted, or null when another instance held it.
 */
export async function pruneRunLog(pool: Pool, before: Date): Promise<number | null> {
  const client = await pool.connect();
  try {
    const pruned = await withAdvisoryTryLock(client, RETENTION_LOCK_KEY, async () => {
      let total = 0;
      for (;;) {
        const result = await client.query(
          `DELETE FROM "${LOGS_TABLE}" WHERE id IN (SELECT id FROM "${LOGS_TABLE}" WHERE timestamp < $1 LIMIT ${PRUNE_BATCH})`,
          [before],
        );
        total += result.rowCount ?? 0;
        if ((result.rowCount ?? 0) < PRUNE_BATCH) break;
      }
      // the dependency waits of the same slots (docs/dependencies.md), once decided
      await client.query(
        `DELETE FROM "${DEPENDENCY_WAITS_TABLE}" WHERE slot < $1 AND state IN ('ran', 'skipped')`,
        [before],
      );
      return total;
    });
    return pruned.acquired ? pruned.value : null;
  } finally {
    client.release();
  }
}

/** A run-log row as Agenda's job logger writes it (the columns of its table). */
export interface RunLogInsert {
  timestamp: Date;
  level: string;
  event: string;
  jobId?: string | undefined;
  jobName: string;
  message: string;
  duration?: number | undefined;
  error?: string | undefined;
  failCount?: number | undefined;
  retryDelay?: number | undefined;
  retryAttempt?: number | undefined;
  agendaName?: string | undefined;
  meta?: Record<string, unknown> | undefined;
}

/**
 * Writes run-log rows in one statement (the columns and values of Agenda's PostgresJobLogger.log,
 * @agendajs/postgres-backend 3.0.6, one array per column).
 */
export async function insertRunLogRows(db: Queryable, rows: readonly RunLogInsert[]): Promise<void> {
  if (rows.length === 0) return;
  const column = <T>(pick: (row: RunLogInsert) => T) => rows.map(pick);
  await db.query(
    `INSERT INTO "${LOGS_TABLE}"
       (timestamp, level, event, job_id, job_name, message, duration, error, fail_count, retry_delay, retry_attempt, agenda_name, meta)
     SELECT * FROM unnest($1::timestamptz[], $2::varchar[], $3::varchar[], $4::varchar[], $5::varchar[], $6::text[],
                          $7::int[], $8::text[], $9::int[], $10::int[], $11::int[], $12::varchar[], $13::jsonb[])`,
    [
      column((row) => row.timestamp),
      column((row) => row.level),
      column((row) => row.event),
      column((row) => row.jobId ?? null),
      column((row) => row.jobName),
      column((row) => row.message),
      column((row) => (row.duration === undefined ? null : Math.round(row.duration))),
      column((row) => row.error ?? null),
      column((row) => row.failCount ?? null),
      column((row) => row.retryDelay ?? null),
      column((row) => row.retryAttempt ?? null),
      column((row) => row.agendaName ?? null),
      column((row) => (row.meta ? JSON.stringify(row.meta) : null)),
    ],
  );
}

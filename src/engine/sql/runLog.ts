import type { Pool } from "pg";
import { withAdvisoryTryLock } from "../advisoryLock.js";
import { metaText } from "../runLogMeta.js";
import {
  DEPENDENCY_WAITS_TABLE,
  jsonRecords,
  jsonTime,
  LOGS_TABLE,
  type Queryable,
  RETENTION_LOCK_KEY,
} from "./tables.js";

/**
 * The run log (Agenda's job log table) as the run path writes and reads it: a slot's outcome, the
 * last start, the rows' insert, pruning. The status's reads of it are in src/status/runReadsSql.ts.
 */

/**
 * The run log's index by task and slot, for the reads in slot order: the timeline (ascending) and
 * the run history (descending) in src/status/timelineSql.ts. Schema version 3 (src/engine/schema.ts).
 */
export const SLOT_INDEX = "agenda_logs_cw_slot_idx";

export async function createSlotIndex(db: Queryable): Promise<void> {
  await db.query(
    `CREATE INDEX IF NOT EXISTS "${SLOT_INDEX}" ON "${LOGS_TABLE}" (job_name, (${metaText("scheduledAt")}), id)
      WHERE event IN ('success', 'fail', 'retry')`,
  );
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
      WHERE job_name = $1 AND ${metaText("scheduledAt")} = $2 AND event IN ('success', 'fail')
        AND ${metaText("outcome")} IN ('succeeded', 'failed', 'skipped') AND timestamp >= $3
      LIMIT 1`,
    [taskName, slot.toISOString(), since],
  );
  return (result.rowCount ?? 0) > 0;
}

export interface StartLogRow {
  timestamp: Date;
  agenda_name: string | null;
  meta: unknown;
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
 * The traceparent of a run's last start row for its slot on its instance (a re-run's span links to
 * the run it repeats, docs/tracing.md); undefined when it was not traced or its row is gone.
 */
export async function selectStartTraceparent(
  db: Queryable,
  run: { jobId: string; slot: Date; instanceId: string | null },
): Promise<string | undefined> {
  const result = await db.query<{ traceparent: string | null }>(
    `SELECT ${metaText("traceparent")} AS traceparent FROM "${LOGS_TABLE}"
      WHERE job_id = $1 AND event = 'start' AND ${metaText("scheduledAt")} = $2
        AND coalesce(${metaText("instanceId")}, agenda_name) IS NOT DISTINCT FROM $3
      ORDER BY timestamp DESC LIMIT 1`,
    [run.jobId, run.slot.toISOString(), run.instanceId],
  );
  return result.rows[0]?.traceparent ?? undefined;
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
  /**
   * The row's id, chosen before its first try: a batch retried after a lost answer (the insert
   * landed, the connection dropped before its reply: a failover, a restart) inserts it once.
   */
  id?: string | undefined;
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
 * @agendajs/postgres-backend 3.0.6, the rows as one JSON parameter: jsonRecords).
 */
export async function insertRunLogRows(db: Queryable, rows: readonly RunLogInsert[]): Promise<void> {
  if (rows.length === 0) return;
  await db.query(
    `INSERT INTO "${LOGS_TABLE}"
       (id, timestamp, level, event, job_id, job_name, message, duration, error, fail_count, retry_delay, retry_attempt, agenda_name, meta)
     SELECT coalesce(id, gen_random_uuid()), timestamp, level, event, job_id, job_name, message, duration, error, fail_count,
            retry_delay, retry_attempt, agenda_name, meta
       FROM jsonb_to_recordset($1::jsonb) AS v(id uuid, timestamp timestamptz, level varchar, event varchar, job_id varchar,
            job_name varchar, message text, duration int, error text, fail_count int, retry_delay int,
            retry_attempt int, agenda_name varchar, meta jsonb)
     ON CONFLICT (id) DO NOTHING`,
    [
      jsonRecords(
        rows.map((row) => ({
          id: row.id ?? null,
          timestamp: jsonTime(row.timestamp),
          level: row.level,
          event: row.event,
          job_id: row.jobId ?? null,
          job_name: row.jobName,
          message: row.message,
          duration: row.duration === undefined ? null : Math.round(row.duration),
          error: row.error ?? null,
          fail_count: row.failCount ?? null,
          retry_delay: row.retryDelay ?? null,
          retry_attempt: row.retryAttempt ?? null,
          agenda_name: row.agendaName ?? null,
          meta: row.meta ?? null,
        })),
      ),
    ],
  );
}

import type { Pool } from "pg";
import { withAdvisoryTryLock } from "../../db/advisoryLock.js";
import { metaText } from "../runLogMeta.js";
import {
  CLOSE_STARTS,
  COMPACT_META,
  insertRunStarts,
  RUN_STARTS_TABLE,
  type RunStartInsert,
} from "./runStarts.js";
import {
  DEPENDENCY_WAITS_TABLE,
  JOBS_TABLE,
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
 * the run history (descending) in src/status/timelineSql.ts; the few records of one slot are
 * sorted after it (by time and id). Schema version 3 (src/engine/schema.ts), without the id since
 * version 10 (a sixth of the index's bytes, and it ordered only records of the same slot).
 */
export const SLOT_INDEX = "agenda_logs_cw_slot_idx";

export async function createSlotIndex(db: Queryable): Promise<void> {
  await db.query(
    `CREATE INDEX IF NOT EXISTS "${SLOT_INDEX}" ON "${LOGS_TABLE}" (job_name, (${metaText("scheduledAt")}))
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

/**
 * The log's rows of runs that started and did not finish their slot: `start` rows (a run that
 * died: src/engine/sql/runStarts.ts) and the records of runs that are not final, their start in
 * the record: cut off at shutdown (`interrupted`) or whose lock another instance took
 * (`lock-lost`, src/engine/runLock.ts); the re-run repeats them. Their partial indexes
 * (UNFINISHED_INDEXES) keep them a short read.
 */
export const UNFINISHED_START = `(event = 'start' OR (event IN ('success', 'fail') AND ${metaText("outcome")} IN ('interrupted', 'lock-lost')))`;

export const UNFINISHED_INDEXES = [
  `CREATE INDEX IF NOT EXISTS "agenda_logs_cw_unfinished_job_idx" ON "${LOGS_TABLE}" (job_id, timestamp) WHERE ${UNFINISHED_START}`,
  `CREATE INDEX IF NOT EXISTS "agenda_logs_cw_unfinished_name_idx" ON "${LOGS_TABLE}" (job_name, timestamp) WHERE ${UNFINISHED_START}`,
];

/**
 * Every start of one job's runs that did not finish: the one in progress (or dead and not yet
 * followed by another start), the log's start rows, the cut-off records (their start in `meta`).
 * Columns: timestamp (the start), agenda_name, meta, event.
 */
function unfinishedStartsOfJob(jobParam: string): string {
  return `(SELECT timestamp, agenda_name, meta, 'start'::varchar AS event FROM "${RUN_STARTS_TABLE}" WHERE job_id = ${jobParam}
           UNION ALL
           SELECT CASE WHEN event = 'start' THEN timestamp
                       ELSE coalesce((${metaText("startedAt")})::timestamptz, timestamp) END,
                  agenda_name, meta, event
             FROM "${LOGS_TABLE}" WHERE job_id = ${jobParam} AND ${UNFINISHED_START})`;
}

/** The last recorded start of a job whose run did not finish: the run that a re-run after a crash repeats. */
export async function selectLastStart(
  db: Queryable,
  jobId: string,
  before: Date,
): Promise<StartLogRow | undefined> {
  const result = await db.query<StartLogRow>(
    `SELECT timestamp, agenda_name, meta FROM ${unfinishedStartsOfJob("$1")} s
      WHERE timestamp < $2 ORDER BY timestamp DESC LIMIT 1`,
    [jobId, before],
  );
  return result.rows[0];
}

/**
 * The traceparent of a run's last start (or cut-off record) for its slot on its instance (a
 * re-run's span links to the run it repeats, docs/tracing.md); undefined when it was not traced
 * or its row is gone.
 */
export async function selectStartTraceparent(
  db: Queryable,
  run: { jobId: string; slot: Date; instanceId: string | null },
): Promise<string | undefined> {
  const result = await db.query<{ traceparent: string | null }>(
    `SELECT ${metaText("traceparent", "s")} AS traceparent FROM ${unfinishedStartsOfJob("$1")} s
      WHERE ${metaText("scheduledAt", "s")} = $2
        AND coalesce(${metaText("instanceId", "s")}, s.agenda_name) IS NOT DISTINCT FROM $3
      ORDER BY s.timestamp DESC LIMIT 1`,
    [run.jobId, run.slot.toISOString(), run.instanceId],
  );
  return result.rows[0]?.traceparent ?? undefined;
}

/** Batch size of the run-log pruning: short transactions on a big table. */
const PRUNE_BATCH = 5_000;

/** What the run-log pruning keeps: rows since `before` (null: any age), and each task's last `keepPerTask` records (0: any number). */
export interface RunLogRetention {
  before: Date | null;
  keepPerTask: number;
}

/**
 * Deletes run-log rows past the retention, in batches, if no other instance is doing it (a
 * try-lock, not a wait): rows older than `before`, and the rows of each task older than its
 * `keepPerTask`-th latest record. Returns the number of rows deleted, or null when another
 * instance held it.
 */
export async function pruneRunLog(pool: Pool, retention: RunLogRetention): Promise<number | null> {
  const client = await pool.connect();
  try {
    const pruned = await withAdvisoryTryLock(client, RETENTION_LOCK_KEY, async () => {
      let total = 0;
      if (retention.before) total += await pruneByAge(client, retention.before);
      if (retention.keepPerTask > 0) total += await pruneByCount(client, retention.keepPerTask);
      return total;
    });
    return pruned.acquired ? pruned.value : null;
  } finally {
    client.release();
  }
}

async function pruneByAge(client: Queryable, before: Date): Promise<number> {
  const total = await deleteInBatches(
    client,
    `DELETE FROM "${LOGS_TABLE}" WHERE id IN (SELECT id FROM "${LOGS_TABLE}" WHERE timestamp < $1 LIMIT ${PRUNE_BATCH})`,
    [before],
  );
  // the dependency waits of the same slots (docs/dependencies.md), once decided
  await client.query(
    `DELETE FROM "${DEPENDENCY_WAITS_TABLE}" WHERE slot < $1 AND state IN ('ran', 'skipped')`,
    [before],
  );
  return total;
}

/**
 * Per task job: the rows written before its `keep`-th latest record (success, fail or retry row),
 * found on Agenda's (job_name, timestamp) index, one task's range at a time.
 */
async function pruneByCount(client: Queryable, keep: number): Promise<number> {
  return deleteInBatches(
    client,
    `DELETE FROM "${LOGS_TABLE}" WHERE id IN (
       SELECT old.id FROM "${JOBS_TABLE}" j
        CROSS JOIN LATERAL (
          SELECT timestamp FROM "${LOGS_TABLE}"
           WHERE job_name = j.name AND event IN ('success', 'fail', 'retry')
           ORDER BY timestamp DESC OFFSET $1 - 1 LIMIT 1) nth
        CROSS JOIN LATERAL (
          SELECT id FROM "${LOGS_TABLE}" WHERE job_name = j.name AND timestamp < nth.timestamp
           LIMIT ${PRUNE_BATCH}) old
        WHERE j.type = 'single'
        LIMIT ${PRUNE_BATCH})`,
    [keep],
  );
}

async function deleteInBatches(client: Queryable, statement: string, values: unknown[]): Promise<number> {
  let total = 0;
  for (;;) {
    const result = await client.query(statement, values);
    total += result.rowCount ?? 0;
    if ((result.rowCount ?? 0) < PRUNE_BATCH) return total;
  }
}

/** A run-log row as Agenda's job logger writes it (the columns of its table). */
export interface RunLogInsert {
  /**
   * The row's id, chosen before its first try: a batch retried after a lost answer (the insert
   * landed, the connection dropped before its reply: a failover, a restart) inserts it once. A
   * start's id is its run's (src/engine/runRecorder.ts): the record that replaces it gets the same.
   */
  id?: string | undefined;
  /** The run whose start this record ends (its id); absent: a row of its own. */
  replaces?: string | undefined;
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
 * Writes a batch of the recorder's rows: the starts to the runs in progress
 * (src/engine/sql/runStarts.ts), the others to the log. A start and the record that ends it
 * never share a batch (the recorder's batch keys them apart), so the start was written before.
 * The records go first: a job's record and its next run's start can share a batch, and that start
 * would otherwise move the finished run's start into the log as one that never finished.
 */
export async function writeRunLogRows(db: Queryable, rows: readonly RunLogInsert[]): Promise<void> {
  const starts: RunStartInsert[] = [];
  const others: RunLogInsert[] = [];
  for (const row of rows) {
    if (row.event === "start" && row.id && row.jobId)
      starts.push({
        id: row.id,
        timestamp: row.timestamp,
        jobId: row.jobId,
        jobName: row.jobName,
        agendaName: row.agendaName ?? null,
        meta: row.meta ?? {},
      });
    else others.push(row);
  }
  await insertRunLogRows(db, others);
  await insertRunStarts(db, starts);
}

const COLUMNS =
  "timestamp, level, event, job_id, job_name, message, duration, error, fail_count, retry_delay, retry_attempt, agenda_name, meta";

/**
 * Writes run-log rows in one statement (the columns and values of Agenda's PostgresJobLogger.log,
 * @agendajs/postgres-backend 3.0.6, the rows as one JSON parameter: jsonRecords). A record that
 * `replaces` a run's start takes its id and ends it (CLOSE_STARTS): the log only grows by inserts.
 */
export async function insertRunLogRows(db: Queryable, rows: readonly RunLogInsert[]): Promise<void> {
  if (rows.length === 0) return;
  await db.query(
    `WITH v AS (
       SELECT * FROM jsonb_to_recordset($1::jsonb) AS v(id uuid, replaces uuid, timestamp timestamptz, level varchar,
            event varchar, job_id varchar, job_name varchar, message text, duration int, error text, fail_count int,
            retry_delay int, retry_attempt int, agenda_name varchar, meta jsonb)),
     closed AS (${CLOSE_STARTS})
     INSERT INTO "${LOGS_TABLE}" (id, ${COLUMNS})
     SELECT coalesce(v.replaces, v.id, gen_random_uuid()), timestamp, level, event, job_id, job_name, message,
            duration, error, fail_count, retry_delay, retry_attempt, agenda_name, ${COMPACT_META} FROM v
     -- the job's next start, on another instance, came first and moved this run's start into the
     -- log as one that never finished: the record takes its place; a row already written (a batch
     -- retried after a lost answer: same id, not a start) is left as it is, so each is written once
     ON CONFLICT (id) DO UPDATE SET (${COLUMNS}) = (EXCLUDED.timestamp, EXCLUDED.level, EXCLUDED.event,
       EXCLUDED.job_id, EXCLUDED.job_name, EXCLUDED.message, EXCLUDED.duration, EXCLUDED.error,
       EXCLUDED.fail_count, EXCLUDED.retry_delay, EXCLUDED.retry_attempt, EXCLUDED.agenda_name, EXCLUDED.meta)
       WHERE "${LOGS_TABLE}".event = 'start'`,
    [
      jsonRecords(
        rows.map((row) => ({
          id: row.id ?? null,
          replaces: row.replaces ?? null,
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

import type { Pool, PoolClient } from "pg";
import { withAdvisoryTryLock } from "../../db/advisoryLock.js";
import { inTransaction } from "../../db/transaction.js";
import { metaText } from "../runLogMeta.js";
import {
  coverRunLog,
  DEFAULT_PARTITION_HOURS,
  dropDetachedPartitions,
  dropPartitionsBefore,
  isNoPartitionError,
  listPartitions,
} from "./runLogPartitions.js";
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
 * Deletes run-log rows past the retention if no other instance is doing it (a try-lock, not a
 * wait): the partitions older than `before` (pruneByAge), and the rows of each task older than its
 * `keepPerTask`-th latest record, in batches. Returns the number of rows deleted (a large
 * partition's by PostgreSQL's estimate), or null when another instance held it.
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

/**
 * By age: the partitions whose rows are all older than `before` are dropped whole
 * (src/engine/sql/runLogPartitions.ts), so up to one partition's width of rows older than it stay
 * until the next prune after their partition ends. Rows deleted one by one only in the legacy
 * partition (the log before version 11, every time up to its conversion) until it is dropped.
 */
async function pruneByAge(client: PoolClient, before: Date): Promise<number> {
  let total = (await dropPartitionsBefore(client, before)) + (await dropDetachedPartitions(client));
  const legacy = (await listPartitions(client)).find((partition) => partition.lower === null);
  if (legacy)
    total += await deleteInBatches(
      client,
      `DELETE FROM "${legacy.name}" WHERE ctid = ANY(ARRAY(SELECT ctid FROM "${legacy.name}" WHERE timestamp < $1 LIMIT ${PRUNE_BATCH}))`,
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
    `DELETE FROM "${LOGS_TABLE}" WHERE (id, timestamp) IN (
       SELECT old.id, old.timestamp FROM "${JOBS_TABLE}" j
        CROSS JOIN LATERAL (
          SELECT timestamp FROM "${LOGS_TABLE}"
           WHERE job_name = j.name AND event IN ('success', 'fail', 'retry')
           ORDER BY timestamp DESC OFFSET $1 - 1 LIMIT 1) nth
        CROSS JOIN LATERAL (
          SELECT id, timestamp FROM "${LOGS_TABLE}" WHERE job_name = j.name AND timestamp < nth.timestamp
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
 * A row for a time no partition of the log covers (a clock far ahead, a dead run's start older
 * than the oldest partition) has its partition created, `partitionHours` wide, and the batch is
 * written again: each row once (insertRunLogRows).
 */
export async function writeRunLogRows(
  db: Pool,
  rows: readonly RunLogInsert[],
  partitionHours = DEFAULT_PARTITION_HOURS,
): Promise<void> {
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
  const write = async () => {
    await insertRunLogRows(db, others);
    await insertRunStarts(db, starts);
  };
  try {
    await write();
  } catch (error) {
    if (!isNoPartitionError(error)) throw error;
    await coverRowTimes(db, rows, starts, partitionHours);
    await write();
  }
}

/** The partitions of the rows' times and of the starts they would move into the log. */
async function coverRowTimes(
  db: Queryable,
  rows: readonly RunLogInsert[],
  starts: readonly RunStartInsert[],
  partitionHours: number,
): Promise<void> {
  const moved = await db.query<{ timestamp: Date }>(
    `SELECT timestamp FROM "${RUN_STARTS_TABLE}" WHERE job_id = ANY($1::text[])`,
    [starts.map((start) => start.jobId)],
  );
  const width = partitionHours * 3_600_000;
  const slots = new Set<number>();
  for (const time of [...rows.map((row) => row.timestamp), ...moved.rows.map((row) => row.timestamp)])
    slots.add(Math.floor(time.getTime() / width) * width);
  for (const slot of slots) await coverRunLog(db, partitionHours, new Date(slot), new Date(slot + 1));
}

const COLUMNS =
  "timestamp, level, event, job_id, job_name, message, duration, error, fail_count, retry_delay, retry_attempt, agenda_name, meta";

/**
 * Writes run-log rows (the columns and values of Agenda's PostgresJobLogger.log,
 * @agendajs/postgres-backend 3.0.6, the rows as one JSON parameter: jsonRecords), each once: a row
 * already there with its id and time (a batch written again after its answer was lost: the id and
 * the time are chosen before the first try) is left as it is, by the partitioned table's primary
 * key (id, timestamp). A record that `replaces` a run's start takes its id and ends it, in one
 * transaction (docs/design.md, "Run history partitions"):
 * 1. the starts are deleted from the runs in progress (CLOSE_STARTS); a start that the job's next
 *    start is moving into the log at that moment is waited for (its row lock);
 * 2. a start not found there was moved into the log as one that never finished (the job's next
 *    start, on another instance, came first): that `start` row is deleted, read in a statement
 *    after the wait, so it sees the move; the record takes its place;
 * 3. the records are inserted. The log only grows by inserts.
 */
export async function insertRunLogRows(db: Pool, rows: readonly RunLogInsert[]): Promise<void> {
  if (rows.length === 0) return;
  const values = jsonRecords(
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
  );
  const replaced = rows.flatMap((row) =>
    row.replaces ? [{ replaces: row.replaces, job_id: row.jobId ?? null }] : [],
  );
  if (replaced.length === 0) {
    await db.query(INSERT_RECORDS, [values]);
    return;
  }
  await inTransaction(db, async (client) => {
    const closed = await client.query<{ id: string }>(CLOSE_STARTS, [jsonRecords(replaced)]);
    const ended = new Set(closed.rows.map((row) => row.id));
    const moved = replaced.map((row) => row.replaces).filter((id) => !ended.has(id));
    if (moved.length > 0)
      await client.query(`DELETE FROM "${LOGS_TABLE}" WHERE id = ANY($1::uuid[]) AND event = 'start'`, [
        moved,
      ]);
    await client.query(INSERT_RECORDS, [values]);
  });
}

const INSERT_RECORDS = `
  INSERT INTO "${LOGS_TABLE}" (id, ${COLUMNS})
  SELECT coalesce(v.replaces, v.id, gen_random_uuid()), timestamp, level, event, job_id, job_name, message,
         duration, error, fail_count, retry_delay, retry_attempt, agenda_name, ${COMPACT_META}
    FROM jsonb_to_recordset($1::jsonb) AS v(id uuid, replaces uuid, timestamp timestamptz, level varchar,
         event varchar, job_id varchar, job_name varchar, message text, duration int, error text, fail_count int,
         retry_delay int, retry_attempt int, agenda_name varchar, meta jsonb)
  ON CONFLICT (id, timestamp) DO NOTHING`;

import type { Pool, PoolClient } from "pg";
import { metaHas, metaJson, metaText } from "../engine/runLogMeta.js";
import {
  BACKFILL_SLOTS_TABLE,
  BACKFILLS_TABLE,
  JOBS_TABLE,
  type JobRow,
  LOGS_TABLE,
  RUN_STARTS_TABLE,
  UNFINISHED_START,
} from "../engine/sql.js";
import { AUDIT_TABLE } from "../store/schema.js";

/**
 * The reads behind the timeline, the paged history and the run detail (agenda_logs), kept apart
 * from the engine's own statements. They read in slot order on the run log's index by task and slot
 * (SLOT_INDEX, src/engine/sql/runLog.ts). A run record is a `success`/`fail` row (the slot's final
 * attempt) or a `retry` row (an attempt its retry policy followed with another), with
 * `meta.outcome`; `meta.logs` and `meta.errorStack` are read only by the run detail.
 */

type Queryable = Pool | PoolClient;

export interface SlotRow {
  id: string;
  job_name: string;
  event: string;
  timestamp: Date;
  duration: number | null;
  error: string | null;
  agenda_name: string | null;
  slot: string;
  outcome: string;
  started_at: string | null;
  finished_at: string | null;
  attempt: string | null;
  trigger: string | null;
  requested_by: string | null;
  rerun: boolean | null;
  rerun_of: { startedAt?: string; instanceId?: string | null } | null;
  instance_id: string | null;
  detail: string | null;
}

const SLOT_COLUMNS = `id, job_name, event, timestamp, duration, error, agenda_name,
  ${metaText("scheduledAt")} AS slot, ${metaText("outcome")} AS outcome, ${metaText("startedAt")} AS started_at,
  ${metaText("finishedAt")} AS finished_at,
  coalesce(${metaText("attempt")}, CASE WHEN ${metaText("started")} = 'true' THEN '1' END) AS attempt,
  ${metaText("trigger")} AS trigger,
  ${metaText("requestedBy")} AS requested_by,
  (${metaText("rerun")})::boolean AS rerun, ${metaJson("rerunOf")} AS rerun_of, ${metaText("instanceId")} AS instance_id,
  ${metaText("detail")} AS detail`;

/**
 * One task's run records with a slot in [from, to), after (slot, id) when given, in slot order.
 * Slots are ISO strings of one format (toISOString), so text order is time order.
 */
export async function selectSlotRows(
  db: Queryable,
  query: { task: string; from: string; to: string; after?: { slot: string; id: string }; limit: number },
): Promise<SlotRow[]> {
  const params: unknown[] = [query.task, query.from, query.to, query.limit];
  let after = "";
  if (query.after) {
    params.push(query.after.slot, query.after.id);
    after = `AND ((${metaText("scheduledAt")}), id) > ($5, $6::uuid)`;
  }
  const result = await db.query<SlotRow>(
    `SELECT ${SLOT_COLUMNS} FROM "${LOGS_TABLE}"
      WHERE job_name = $1 AND event IN ('success', 'fail', 'retry')
        AND (${metaText("scheduledAt")}) >= $2 AND (${metaText("scheduledAt")}) < $3 ${after}
        AND ${metaHas("outcome")}
      ORDER BY (${metaText("scheduledAt")}), id LIMIT $4`,
    params,
  );
  return result.rows;
}

/** A job row as the timeline reads it: the schedule and run fields of JobRow, and when it was created. */
export type TimelineJobRow = Pick<
  JobRow,
  | "name"
  | "disabled"
  | "repeat_interval"
  | "repeat_timezone"
  | "next_run_at"
  | "locked_at"
  | "last_run_at"
  | "last_finished_at"
> & {
  created_at: Date | null;
  /** `data.policy.exclude`: the calendars whose slots are skipped (docs/calendars.md). */
  exclude: unknown;
};

export async function selectTimelineJobs(db: Queryable): Promise<TimelineJobRow[]> {
  const result = await db.query<TimelineJobRow>(
    `SELECT name, disabled, repeat_interval, repeat_timezone, next_run_at, locked_at, last_run_at,
            last_finished_at, created_at, data->'policy'->'exclude' AS exclude
       FROM "${JOBS_TABLE}" WHERE type = 'single'`,
  );
  return result.rows;
}

export interface LastStartRow {
  id: string;
  job_name: string;
  timestamp: Date;
  slot: string | null;
  instance_id: string | null;
  trigger: string | null;
}

/**
 * The latest start of each of `names` (the runs in progress, or cut off and not yet re-run): the
 * runs in progress (src/engine/sql/runStarts.ts) and the log's start rows (runs that died).
 */
export async function selectLastStarts(db: Queryable, names: string[]): Promise<LastStartRow[]> {
  if (names.length === 0) return [];
  const result = await db.query<LastStartRow>(
    `SELECT s.* FROM unnest($1::text[]) AS n(name) CROSS JOIN LATERAL (
       SELECT * FROM (
         SELECT id, job_name, timestamp, ${metaText("scheduledAt")} AS slot,
                coalesce(${metaText("instanceId")}, agenda_name) AS instance_id, ${metaText("trigger")} AS trigger
           FROM "${RUN_STARTS_TABLE}" s
          -- of the job as it is now (a start of a job row dropped by hand is no run of this task)
          WHERE job_name = n.name AND EXISTS (SELECT 1 FROM "${JOBS_TABLE}" j WHERE j.id::text = s.job_id)
         UNION ALL
         (SELECT id, job_name, timestamp, ${metaText("scheduledAt")} AS slot,
                 coalesce(${metaText("instanceId")}, agenda_name) AS instance_id, ${metaText("trigger")} AS trigger
            FROM "${LOGS_TABLE}" WHERE job_name = n.name AND ${UNFINISHED_START} AND event = 'start'
           ORDER BY timestamp DESC LIMIT 1)) starts
        ORDER BY timestamp DESC LIMIT 1) s`,
    [names],
  );
  return result.rows;
}

export interface HistoryQuery {
  task: string;
  limit: number;
  /** The last run of the previous page: this page holds the runs after it (historyOrder). */
  before?: HistoryCursor | undefined;
  outcomes?: string[] | undefined;
  trigger?: "schedule" | "manual" | "rerun" | "backfill" | undefined;
  /** The end time (when the record was written) from, inclusive. */
  from?: Date | undefined;
  /** The end time to, exclusive. */
  to?: Date | undefined;
}

/** A run record's place in the history's order: its slot, when it was written, its id. */
export interface HistoryCursor {
  slot: string;
  timestamp: Date;
  id: string;
}

/**
 * The history's order, "newest first": by slot, newest first, since that is what an operator reads
 * down a task's runs (a late run of an older slot stays beside its slot, wherever its record came
 * in the log); the attempts of one slot by the time their records were written, latest first; then by id, so that
 * the order is total and a page's last row is a keyset cursor. The slot index (SLOT_INDEX, task and
 * slot) read backward gives the slot order; the few records of a slot are sorted after it.
 */
const HISTORY_ORDER = `(${metaText("scheduledAt")}) DESC, timestamp DESC, id DESC`;

/** A page of a task's run records in the history's order (HISTORY_ORDER), keyset-paged on it. */
export async function selectHistoryPage(db: Queryable, query: HistoryQuery): Promise<SlotRow[]> {
  const { text, values } = historyPageStatement(query);
  return (await db.query<SlotRow>(text, values)).rows;
}

/** selectHistoryPage's statement (for EXPLAIN in the tests). */
export function historyPageStatement(query: HistoryQuery): { text: string; values: unknown[] } {
  const values: unknown[] = [query.task, query.limit];
  const where: string[] = [];
  const param = (value: unknown) => {
    values.push(value);
    return `$${values.length}`;
  };
  if (query.outcomes) where.push(`${metaText("outcome")} = ANY(${param(query.outcomes)}::text[])`);
  if (query.trigger) where.push(`coalesce(${metaText("trigger")}, 'schedule') = ${param(query.trigger)}`);
  if (query.from) where.push(`timestamp >= ${param(query.from)}`);
  if (query.to) where.push(`timestamp < ${param(query.to)}`);
  if (query.before) {
    const { slot, timestamp, id } = query.before;
    where.push(
      `((${metaText("scheduledAt")}), timestamp, id) < (${param(slot)}, ${param(timestamp)}, ${param(id)}::uuid)`,
    );
  }
  return {
    text: `SELECT ${SLOT_COLUMNS} FROM "${LOGS_TABLE}"
      WHERE job_name = $1 AND event IN ('success', 'fail', 'retry') AND ${metaHas("outcome")}
        ${where.map((condition) => `AND ${condition}`).join(" ")}
      ORDER BY ${HISTORY_ORDER} LIMIT $2`,
    values,
  };
}

export interface RunDetailRow extends SlotRow {
  /** The whole `meta` (its log lines and error stack are decoded by src/engine/runLogMeta.ts). */
  meta: unknown;
}

/** One run record (or a start: a run in progress, or one that died) by id, with its log lines and error stack. */
export async function selectRunDetail(db: Queryable, id: string): Promise<RunDetailRow | undefined> {
  const result = await db.query<RunDetailRow & { slot: string | null; outcome: string | null }>(
    `SELECT ${SLOT_COLUMNS}, meta
       FROM "${LOGS_TABLE}" WHERE id = $1::uuid AND event IN ('success', 'fail', 'retry', 'start')
     UNION ALL
     SELECT ${SLOT_COLUMNS}, meta FROM (
       SELECT id, job_name, 'start'::varchar AS event, timestamp, NULL::int AS duration, NULL::text AS error,
              agenda_name, meta
         FROM "${RUN_STARTS_TABLE}" WHERE id = $1::uuid) s
     LIMIT 1`,
    [id],
  );
  return result.rows[0];
}

/** After a start row: the same instance's outcome row of that task, if one came before its next start. */
export async function selectOutcomeAfterStart(
  db: Queryable,
  start: { job_name: string; timestamp: Date; instance_id: string | null },
): Promise<{ id: string; event: string } | undefined> {
  const result = await db.query<{ id: string; event: string }>(
    `SELECT id, event FROM "${LOGS_TABLE}"
      WHERE job_name = $1 AND timestamp >= $2 AND event IN ('start', 'success', 'fail')
        AND coalesce(${metaText("instanceId")}, agenda_name) IS NOT DISTINCT FROM $3 AND ${metaHas("scheduledAt")}
        AND NOT (event = 'start' AND timestamp = $2)
      ORDER BY timestamp LIMIT 1`,
    [start.job_name, start.timestamp, start.instance_id],
  );
  const row = result.rows[0];
  return row && row.event !== "start" ? row : undefined;
}

/**
 * Whether a backfill run's start is the run its slot row holds now: the slot is `running`, held by
 * the start's instance, and its run began (the slot row's start save, src/engine/backfillRunner.ts)
 * no later than this start. Backfill runs of one task run side by side, each on its slot row, not on
 * the task's job row, so the job row's lock says nothing about them; a later start of the same slot
 * (a takeover) holds the row then, and an earlier start of it was followed by its record or handed
 * back before the row was claimed again.
 */
export async function selectBackfillSlotHeld(
  db: Queryable,
  start: { job_name: string; slot: string; instance_id: string | null; timestamp: Date },
): Promise<boolean> {
  const result = await db.query(
    `SELECT 1 FROM "${BACKFILL_SLOTS_TABLE}" s JOIN "${BACKFILLS_TABLE}" b ON b.id = s.backfill_id
      WHERE b.task = $1 AND s.slot = $2::timestamptz AND s.state = 'running'
        AND s.locked_by IS NOT DISTINCT FROM $3 AND s.started_at <= $4
      LIMIT 1`,
    [start.job_name, start.slot, start.instance_id, start.timestamp],
  );
  return (result.rowCount ?? 0) > 0;
}

/** The last schedule or enable change of each task (the audit trail): no slot before it is "missed". */
export async function selectLastChanges(db: Queryable, namespace: string): Promise<Map<string, Date>> {
  const result = await db.query<{ task: string; at: Date }>(
    `SELECT task, max(at) AS at FROM "${AUDIT_TABLE}" WHERE namespace = $1 GROUP BY task`,
    [namespace],
  );
  return new Map(result.rows.map((row) => [row.task, row.at]));
}

export interface SlotBucketRow {
  /** floor((slot - from) / bucketMs), as text (a bigint). */
  bucket: string;
  /** Run records in the bucket. */
  records: number;
  succeeded: number;
  skipped: number;
  failed: number;
  /** Re-runs' first attempts: each also marks the run it repeats as interrupted. */
  interrupted: number;
  max_lateness_ms: number | null;
  max_duration_ms: number | null;
  /** "rank slot id" of the record of the most severe outcome (earliest slot first): the bucket's run to open. */
  worst: string;
  /** "slot id" of the bucket's last record in (slot, id) order: where a cut page continues. */
  last: string;
  /** The slots with a record, as milliseconds after the bucket's start (for the missed-slot check). */
  slots: number[] | null;
}

/**
 * One task's run records with a slot in [from, to), after (slot, id) when given, summed per
 * bucket of `bucketMs` counted from `from`: one row per bucket, in bucket order, at most `limit`.
 * The same index range scan as selectSlotRows; only the sums leave the database.
 */
export async function selectSlotBuckets(db: Queryable, query: SlotBucketsQuery): Promise<SlotBucketRow[]> {
  const { text, values } = slotBucketsStatement(query);
  return (await db.query<SlotBucketRow>(text, values)).rows;
}

/** A record's id, the last 36 characters of SlotBucketRow's `worst` and `last`. */
export function idOf(key: string): string {
  return key.slice(-36);
}

/** The slot of SlotBucketRow's `last`. */
export function slotOf(last: string): string {
  return last.slice(0, -37);
}

export interface SlotBucketsQuery {
  task: string;
  from: string;
  to: string;
  bucketMs: number;
  after?: { slot: string; id: string } | undefined;
  limit: number;
  withSlots: boolean;
}

/** selectSlotBuckets' statement (for EXPLAIN in the tests). */
export function slotBucketsStatement(query: SlotBucketsQuery): { text: string; values: unknown[] } {
  const params: unknown[] = [
    query.task,
    query.from,
    query.to,
    query.limit,
    query.bucketMs,
    Date.parse(query.from),
  ];
  let after = "";
  if (query.after) {
    params.push(query.after.slot, query.after.id);
    after = `AND ((${metaText("scheduledAt")}), id) > ($7, $8::uuid)`;
  }
  const ms = (iso: string) => `round(date_part('epoch', (${iso})::timestamptz) * 1000)::bigint`;
  // plain aggregates only (no ORDER BY within one, no DISTINCT): each is one pass over the group's rows.
  // min/max of "rank slot id" and "slot id" pick the most severe and the last record; slots and ids
  // are of one length, so text order is their order
  return {
    text: `WITH r AS (
       SELECT id, duration, ${metaText("scheduledAt")} AS slot_text, ${ms(metaText("scheduledAt"))} AS slot_ms,
              CASE ${metaText("outcome")} WHEN 'succeeded' THEN 2 WHEN 'skipped' THEN 1 ELSE 0 END AS rank,
              ${ms(metaText("startedAt"))} AS started_ms,
              coalesce((${metaText("rerun")})::boolean, false) AND coalesce((${metaText("attempt")})::int, 1) = 1 AS cut,
              ${ms(`${metaJson("rerunOf")}->>'startedAt'`)} AS cut_started_ms
         FROM "${LOGS_TABLE}"
        WHERE job_name = $1 AND event IN ('success', 'fail', 'retry')
          AND (${metaText("scheduledAt")}) >= $2 AND (${metaText("scheduledAt")}) < $3 ${after}
          AND ${metaHas("outcome")}
     ), b AS (
       SELECT r.*, (slot_ms - $6::bigint) / $5::bigint AS bucket FROM r
     )
     SELECT bucket, count(*)::int AS records,
            count(*) FILTER (WHERE rank = 2)::int AS succeeded,
            count(*) FILTER (WHERE rank = 1)::int AS skipped,
            count(*) FILTER (WHERE rank = 0)::int AS failed,
            count(*) FILTER (WHERE cut)::int AS interrupted,
            greatest(max(started_ms - slot_ms), max(cut_started_ms - slot_ms) FILTER (WHERE cut))::float8
              AS max_lateness_ms,
            max(duration)::float8 AS max_duration_ms,
            min((rank || ' ' || slot_text || ' ' || id) COLLATE "C") AS worst,
            max((slot_text || ' ' || id) COLLATE "C") AS last,
            ${query.withSlots ? "array_agg((slot_ms - $6::bigint - bucket * $5::bigint)::int)" : "NULL::int[]"} AS slots
       FROM b GROUP BY bucket ORDER BY bucket LIMIT $4`,
    values: params,
  };
}

/** Run records by id (the buckets that hold one record show that record in full). */
export async function selectSlotRowsById(db: Queryable, ids: string[]): Promise<SlotRow[]> {
  if (ids.length === 0) return [];
  const result = await db.query<SlotRow>(
    `SELECT ${SLOT_COLUMNS} FROM "${LOGS_TABLE}" WHERE id = ANY($1::uuid[])`,
    [ids],
  );
  return result.rows;
}

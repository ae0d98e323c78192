import { type Queryable, SHARD_SLOTS_TABLE, SHARDS_TABLE } from "../engine/sql.js";

/**
 * The shard progress of the sharded slots in a range (the dashboard's timeline: done/total and the
 * failed shards named, docs/dashboard.md): one row per slot, its latest round, with its shards
 * counted by state. A slot keeps its shard rows while it is among its task's newest ended slots
 * (src/sharding/slotCoordinator.ts prunes the rest), so the range holds at most those.
 */

export interface ShardProgressQuery {
  from: Date;
  to: Date;
  /** Only these tasks; undefined: every task. */
  tasks?: readonly string[] | undefined;
}

export interface SlotProgress {
  task: string;
  slot: Date;
  round: number;
  shardCount: number;
  /** Shards by state: queued, running, succeeded, failed, skipped. */
  counts: Record<"queued" | "running" | "succeeded" | "failed" | "skipped", number>;
  /** The first failed shards' indexes, lowest first (at most FAILED_NAMED). */
  failed: number[];
  reduce: string;
  outcome: string | null;
  detail: string | null;
}

/** Failed shards named per slot; the count says how many there are in all. */
export const FAILED_NAMED = 10;
/** Slots answered at most (a range of a busy sharded task keeps 50 ended slots per task). */
export const MAX_PROGRESS_SLOTS = 5_000;

interface ProgressRow {
  task_name: string;
  scheduled_at: Date;
  round: number;
  shard_count: number;
  reduce_state: string;
  outcome: string | null;
  detail: string | null;
  queued: number;
  running: number;
  succeeded: number;
  failed: number;
  skipped: number;
  failed_first: number[] | null;
}

export async function selectShardProgress(db: Queryable, query: ShardProgressQuery): Promise<SlotProgress[]> {
  const result = await db.query<ProgressRow>(
    `SELECT sl.task_name, sl.scheduled_at, sl.round, sl.shard_count, sl.reduce_state, sl.outcome, sl.detail, c.*
       FROM "${SHARD_SLOTS_TABLE}" sl
       CROSS JOIN LATERAL (
         SELECT count(*) FILTER (WHERE s.state = 'queued')::int AS queued,
                count(*) FILTER (WHERE s.state = 'running')::int AS running,
                count(*) FILTER (WHERE s.state = 'succeeded')::int AS succeeded,
                count(*) FILTER (WHERE s.state = 'failed')::int AS failed,
                count(*) FILTER (WHERE s.state = 'skipped')::int AS skipped,
                (array_agg(s.shard_index ORDER BY s.shard_index) FILTER (WHERE s.state = 'failed'))[1:$4] AS failed_first
           FROM "${SHARDS_TABLE}" s
          WHERE s.task_name = sl.task_name AND s.scheduled_at = sl.scheduled_at AND s.round = sl.round) c
      WHERE sl.scheduled_at >= $1 AND sl.scheduled_at < $2
        AND ($3::text[] IS NULL OR sl.task_name = ANY($3::text[]))
        AND sl.round = (SELECT max(x.round) FROM "${SHARD_SLOTS_TABLE}" x
                         WHERE x.task_name = sl.task_name AND x.scheduled_at = sl.scheduled_at)
      ORDER BY sl.task_name, sl.scheduled_at
      LIMIT $5`,
    [query.from, query.to, query.tasks ? [...query.tasks] : null, FAILED_NAMED, MAX_PROGRESS_SLOTS],
  );
  return result.rows.map((row) => ({
    task: row.task_name,
    slot: row.scheduled_at,
    round: row.round,
    shardCount: row.shard_count,
    counts: {
      queued: row.queued,
      running: row.running,
      succeeded: row.succeeded,
      failed: row.failed,
      skipped: row.skipped,
    },
    failed: row.failed_first ?? [],
    reduce: row.reduce_state,
    outcome: row.outcome,
    detail: row.detail,
  }));
}

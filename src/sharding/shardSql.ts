import type { PoolClient } from "pg";
import { INSTANCES_TABLE, type Queryable, SHARD_SLOTS_TABLE, SHARDS_TABLE } from "../engine/sql.js";
import type { ReduceState, ShardOutcome } from "./outcome.js";

/**
 * The statements of sharded tasks (docs/sharding.md), on the tables of src/engine/sql/shards.ts.
 * Every write of a shard's end or a reduce's end is fenced on who holds it (and, for a shard, on
 * which claim of it: `runs`), so that a holder that lost its lease cannot overwrite the outcome of
 * the instance that took the shard over.
 */

/** The channel a slot's new shards are announced on (payload: the task name). */
export const SHARDS_CHANNEL = "cronwarden_shards";

export interface SlotKey {
  taskName: string;
  scheduledAt: Date;
  round: number;
}

export interface ShardKey extends SlotKey {
  index: number;
}

export interface SlotRow {
  task_name: string;
  scheduled_at: Date;
  round: number;
  shard_count: number;
  source: "static" | "map";
  trigger: string;
  opened_at: Date;
  opened_by: string;
  coordinator: string | null;
  reduce_state: ReduceState;
  reduce_holder: string | null;
  reduce_runs: number;
  reduce_started_at: Date | null;
  reduce_ended_at: Date | null;
  reduce_error: string | null;
  outcome: "succeeded" | "failed" | null;
  detail: string | null;
  ended_at: Date | null;
}

const SLOT_MATCH = "task_name = $1 AND scheduled_at = $2 AND round = $3";
const slotParams = (key: SlotKey) => [key.taskName, key.scheduledAt, key.round];
const LIVE = `SELECT instance_id FROM "${INSTANCES_TABLE}"`;
const seconds = (ms: number) => ms / 1000;

/** The latest round of a task's slot, or undefined when it was never sharded. */
export async function readLatestSlot(
  db: Queryable,
  taskName: string,
  scheduledAt: Date,
): Promise<SlotRow | undefined> {
  const result = await db.query<SlotRow>(
    `SELECT * FROM "${SHARD_SLOTS_TABLE}" WHERE task_name = $1 AND scheduled_at = $2 ORDER BY round DESC LIMIT 1`,
    [taskName, scheduledAt],
  );
  return result.rows[0];
}

/** The registered instances (live, or dead and not yet confirmed by a liveness check), sorted. */
export async function selectRegisteredInstances(db: Queryable): Promise<string[]> {
  const result = await db.query<{ instance_id: string }>(`${LIVE} ORDER BY instance_id`);
  return result.rows.map((row) => row.instance_id);
}

export interface NewSlot extends SlotKey {
  source: "static" | "map";
  trigger: string;
  openedBy: string;
  hasReduce: boolean;
  /** Each shard's parameter or map item, as JSON text. */
  parameters: readonly string[];
  /** Each shard's instance (src/sharding/assignment.ts); undefined: any. */
  assigned: readonly (string | undefined)[];
}

/**
 * Creates a slot's row and its shards in one transaction, if that round of the slot has no row yet
 * (two coordinators of one slot: the second finds the first's), and announces them. True when
 * this call created them.
 */
export async function insertSlot(client: PoolClient, slot: NewSlot): Promise<boolean> {
  await client.query("BEGIN");
  try {
    const inserted = await client.query(
      `INSERT INTO "${SHARD_SLOTS_TABLE}" (task_name, scheduled_at, round, shard_count, source, trigger, opened_by, coordinator, reduce_state)
       VALUES ($1, $2, $3, $4, $5, $6, $7, $7, $8)
       ON CONFLICT (task_name, scheduled_at, round) DO NOTHING`,
      [
        ...slotParams(slot),
        slot.parameters.length,
        slot.source,
        slot.trigger,
        slot.openedBy,
        slot.hasReduce ? "waiting" : "none",
      ],
    );
    if ((inserted.rowCount ?? 0) === 0) {
      await client.query("ROLLBACK");
      return false;
    }
    await client.query(
      `INSERT INTO "${SHARDS_TABLE}" (task_name, scheduled_at, round, shard_index, parameter, assigned_to)
       SELECT $1, $2, $3, (p.ordinality - 1)::int, p.value, a.instance
         FROM jsonb_array_elements($4::jsonb) WITH ORDINALITY AS p(value, ordinality)
         LEFT JOIN unnest($5::text[]) WITH ORDINALITY AS a(instance, ordinality) ON a.ordinality = p.ordinality
       ON CONFLICT DO NOTHING`,
      [...slotParams(slot), `[${slot.parameters.join(",")}]`, slot.assigned.map((id) => id ?? null)],
    );
    await client.query("SELECT pg_notify($1, $2)", [SHARDS_CHANNEL, slot.taskName]);
    await client.query("COMMIT");
    return true;
  } catch (error) {
    await client.query("ROLLBACK").catch(() => {});
    throw error;
  }
}

/** Marks who coordinates the slot now (a takeover's coordinator resumes it). */
export async function markCoordinator(db: Queryable, key: SlotKey, instanceId: string): Promise<void> {
  await db.query(`UPDATE "${SHARD_SLOTS_TABLE}" SET coordinator = $4 WHERE ${SLOT_MATCH}`, [
    ...slotParams(key),
    instanceId,
  ]);
}

/** Wakes the shard workers of every instance for a task's shards. */
export async function notifyShards(db: Queryable, taskName: string): Promise<void> {
  await db.query("SELECT pg_notify($1, $2)", [SHARDS_CHANNEL, taskName]);
}

/** How many of a slot's shards are in each state. */
export async function slotProgress(db: Queryable, key: SlotKey): Promise<Record<string, number>> {
  const result = await db.query<{ state: string; count: number }>(
    `SELECT state, count(*)::int AS count FROM "${SHARDS_TABLE}" WHERE ${SLOT_MATCH} GROUP BY state`,
    slotParams(key),
  );
  return Object.fromEntries(result.rows.map((row) => [row.state, row.count]));
}

/** The tasks that have shards queued or running, in any slot. */
export async function selectOpenShardTasks(db: Queryable): Promise<string[]> {
  const result = await db.query<{ task_name: string }>(
    `SELECT DISTINCT task_name FROM "${SHARDS_TABLE}" WHERE state IN ('queued', 'running')`,
  );
  return result.rows.map((row) => row.task_name);
}

export interface ClaimedShardRow {
  task_name: string;
  scheduled_at: Date;
  round: number;
  shard_index: number;
  shard_count: number;
  trigger: string;
  parameter: unknown;
  runs: number;
  /** Set when the shard had been started before (its holder died or lost its lease). */
  previous_holder: string | null;
}

export interface ClaimRequest {
  instanceId: string;
  tasks: readonly string[];
  limit: number;
  leaseMs: number;
  /** This worker has been idle a while: it may take other instances' queued shards older than stealAfterMs. */
  steal: boolean;
  stealAfterMs: number;
}

/**
 * Claims up to `limit` shards, `FOR UPDATE SKIP LOCKED`: first shards whose holder died or whose
 * lease lapsed, then this instance's own (by index), then, when it may steal, the queued shards of
 * instances that are behind (from the highest index down, away from where their owner takes).
 * Shards assigned to no instance, or to one no longer registered (dead), are anyone's.
 */
export async function claimShards(db: Queryable, request: ClaimRequest): Promise<ClaimedShardRow[]> {
  const result = await db.query<ClaimedShardRow>(
    `WITH picked AS (
       SELECT s.task_name, s.scheduled_at, s.round, s.shard_index, s.holder
         FROM "${SHARDS_TABLE}" s
        WHERE s.state IN ('queued', 'running') AND s.task_name = ANY($2::text[])
          AND CASE WHEN s.state = 'queued'
                THEN s.assigned_to = $1 OR s.assigned_to IS NULL OR s.assigned_to NOT IN (${LIVE})
                     OR ($5 AND s.created_at < now() - make_interval(secs => $6))
                ELSE s.lease_until < now() OR s.holder NOT IN (${LIVE}) END
        ORDER BY CASE WHEN s.state = 'running' THEN 0 WHEN s.assigned_to = $1 THEN 1 ELSE 2 END,
                 s.scheduled_at, CASE WHEN s.assigned_to = $1 THEN s.shard_index ELSE -s.shard_index END
        LIMIT $3 FOR UPDATE SKIP LOCKED
     )
     UPDATE "${SHARDS_TABLE}" s
        SET state = 'running', holder = $1, lease_until = now() + make_interval(secs => $4),
            runs = s.runs + 1, attempts = 0, started_at = now()
       FROM picked p, "${SHARD_SLOTS_TABLE}" sl
      WHERE s.task_name = p.task_name AND s.scheduled_at = p.scheduled_at AND s.round = p.round
        AND s.shard_index = p.shard_index
        AND sl.task_name = p.task_name AND sl.scheduled_at = p.scheduled_at AND sl.round = p.round
      RETURNING s.task_name, s.scheduled_at, s.round, s.shard_index, sl.shard_count, sl.trigger, s.parameter,
                s.runs, p.holder AS previous_holder`,
    [
      request.instanceId,
      request.tasks,
      request.limit,
      seconds(request.leaseMs),
      request.steal,
      seconds(request.stealAfterMs),
    ],
  );
  return result.rows;
}

export interface HeldShard extends ShardKey {
  runs: number;
}

/** Renews the leases of shards this instance holds; returns those it still holds (the others were taken). */
export async function renewShardLeases(
  db: Queryable,
  instanceId: string,
  leaseMs: number,
  held: readonly HeldShard[],
): Promise<HeldShard[]> {
  if (held.length === 0) return [];
  const result = await db.query<{
    task_name: string;
    scheduled_at: Date;
    round: number;
    shard_index: number;
    runs: number;
  }>(
    `UPDATE "${SHARDS_TABLE}" s SET lease_until = now() + make_interval(secs => $2)
       FROM jsonb_to_recordset($3::jsonb) AS h(task_name text, scheduled_at timestamptz, round int, shard_index int, runs int)
      WHERE s.task_name = h.task_name AND s.scheduled_at = h.scheduled_at AND s.round = h.round
        AND s.shard_index = h.shard_index AND s.runs = h.runs AND s.holder = $1 AND s.state = 'running'
      RETURNING s.task_name, s.scheduled_at, s.round, s.shard_index, s.runs`,
    [instanceId, seconds(leaseMs), JSON.stringify(held.map(heldRecord))],
  );
  return result.rows.map((row) => ({
    taskName: row.task_name,
    scheduledAt: row.scheduled_at,
    round: row.round,
    index: row.shard_index,
    runs: row.runs,
  }));
}

function heldRecord(shard: HeldShard) {
  return {
    task_name: shard.taskName,
    scheduled_at: shard.scheduledAt.toISOString(),
    round: shard.round,
    shard_index: shard.index,
    runs: shard.runs,
  };
}

export interface ShardEnd {
  outcome: ShardOutcome;
  attempts: number;
  durationMs: number;
  /** The returned value as JSON text (src/sharding/shardPlan.ts storedJson). */
  result: string | null;
  error: string | null;
}

/**
 * A shard's end, fenced on its holder and claim: "taken" when the shard was taken over meanwhile;
 * "tail" when no other shard of its slot was queued any more (the slot's last shards are running:
 * the caller asks slotHasOpenShards after this commit, see src/sharding/shardWorker.ts).
 */
export async function endShard(
  db: Queryable,
  instanceId: string,
  shard: HeldShard,
  end: ShardEnd,
): Promise<"written" | "tail" | "taken"> {
  const result = await db.query<{ written: number; tail: boolean | null }>(
    `WITH ended AS (
       UPDATE "${SHARDS_TABLE}"
          SET state = $7, attempts = $8, duration_ms = $9, result = $10::jsonb, error = $11, ended_at = now(), lease_until = NULL
        WHERE ${SLOT_MATCH} AND shard_index = $4 AND runs = $5 AND holder = $6 AND state = 'running'
        RETURNING shard_index)
     SELECT count(*)::int AS written,
            bool_and(NOT EXISTS (SELECT 1 FROM "${SHARDS_TABLE}" o WHERE o.task_name = $1 AND o.scheduled_at = $2
                       AND o.round = $3 AND o.state = 'queued')) AS tail
       FROM ended`,
    [
      ...slotParams(shard),
      shard.index,
      shard.runs,
      instanceId,
      end.outcome,
      end.attempts,
      Math.round(end.durationMs),
      end.result,
      end.error,
    ],
  );
  const row = result.rows[0];
  return !row || row.written === 0 ? "taken" : row.tail ? "tail" : "written";
}

/** Whether any shard of the slot is queued or running (read after a shard's end was committed). */
export async function slotHasOpenShards(db: Queryable, key: SlotKey): Promise<boolean> {
  const result = await db.query<{ open: boolean }>(
    `SELECT EXISTS (SELECT 1 FROM "${SHARDS_TABLE}" WHERE ${SLOT_MATCH} AND state IN ('queued', 'running')) AS open`,
    slotParams(key),
  );
  return result.rows[0]?.open ?? true;
}

/** Gives shards this instance holds back to the queue (a drain that cut them off): another instance runs them. */
export async function releaseShards(
  db: Queryable,
  instanceId: string,
  held: readonly HeldShard[],
): Promise<void> {
  if (held.length === 0) return;
  await db.query(
    `UPDATE "${SHARDS_TABLE}" s SET state = 'queued', holder = NULL, lease_until = NULL, assigned_to = NULL
       FROM jsonb_to_recordset($2::jsonb) AS h(task_name text, scheduled_at timestamptz, round int, shard_index int, runs int)
      WHERE s.task_name = h.task_name AND s.scheduled_at = h.scheduled_at AND s.round = h.round
        AND s.shard_index = h.shard_index AND s.runs = h.runs AND s.holder = $1 AND s.state = 'running'`,
    [instanceId, JSON.stringify(held.map(heldRecord))],
  );
}

export interface ShardRow {
  shard_index: number;
  parameter: unknown;
  assigned_to: string | null;
  state: "queued" | "running" | ShardOutcome;
  holder: string | null;
  runs: number;
  attempts: number;
  started_at: Date | null;
  ended_at: Date | null;
  duration_ms: number | null;
  result: unknown;
  error: string | null;
}

/** Every shard of a slot, by index (the reduce's input, GET .../shards). */
export async function selectShards(db: Queryable, key: SlotKey): Promise<ShardRow[]> {
  const result = await db.query<ShardRow>(
    `SELECT shard_index, parameter, assigned_to, state, holder, runs, attempts, started_at, ended_at, duration_ms, result, error
       FROM "${SHARDS_TABLE}" WHERE ${SLOT_MATCH} ORDER BY shard_index`,
    slotParams(key),
  );
  return result.rows;
}

/** Each shard's outcome and error, without its parameter and value (a slot of 100,000 shards stays small). */
export async function selectShardOutcomes(
  db: Queryable,
  key: SlotKey,
): Promise<{ shard_index: number; state: ShardRow["state"]; error: string | null }[]> {
  const result = await db.query<{ shard_index: number; state: ShardRow["state"]; error: string | null }>(
    `SELECT shard_index, state, error FROM "${SHARDS_TABLE}" WHERE ${SLOT_MATCH}`,
    slotParams(key),
  );
  return result.rows;
}

/** When the slot's first shard started (for the slot's duration), or null. */
export async function firstShardStart(db: Queryable, key: SlotKey): Promise<Date | null> {
  const result = await db.query<{ first: Date | null }>(
    `SELECT min(started_at) AS first FROM "${SHARDS_TABLE}" WHERE ${SLOT_MATCH}`,
    slotParams(key),
  );
  return result.rows[0]?.first ?? null;
}

/**
 * Claims the slot's reduce: waiting, or started by a coordinator that is no longer registered (it
 * died during the reduce; the reduce never ended, so it runs again). True when this call claimed it.
 */
export async function claimReduce(db: Queryable, key: SlotKey, instanceId: string): Promise<boolean> {
  const result = await db.query(
    `UPDATE "${SHARD_SLOTS_TABLE}"
        SET reduce_state = 'running', reduce_holder = $4, reduce_runs = reduce_runs + 1, reduce_started_at = now()
      WHERE ${SLOT_MATCH}
        AND (reduce_state = 'waiting' OR (reduce_state = 'running' AND reduce_holder NOT IN (${LIVE})))`,
    [...slotParams(key), instanceId],
  );
  return (result.rowCount ?? 0) > 0;
}

/** The reduce's end, fenced on its holder. */
export async function endReduce(
  db: Queryable,
  key: SlotKey,
  instanceId: string,
  end: { state: "succeeded" | "failed"; error: string | null },
): Promise<boolean> {
  const result = await db.query(
    `UPDATE "${SHARD_SLOTS_TABLE}" SET reduce_state = $5, reduce_error = $6, reduce_ended_at = now()
      WHERE ${SLOT_MATCH} AND reduce_holder = $4 AND reduce_state = 'running'`,
    [...slotParams(key), instanceId, end.state, end.error],
  );
  return (result.rowCount ?? 0) > 0;
}

/** The slot's derived outcome, written once (a second coordinator's write finds it set). */
export async function endSlot(
  db: Queryable,
  key: SlotKey,
  end: { outcome: "succeeded" | "failed"; detail: string },
): Promise<void> {
  await db.query(
    `UPDATE "${SHARD_SLOTS_TABLE}" SET outcome = $4, detail = $5, ended_at = now() WHERE ${SLOT_MATCH} AND outcome IS NULL`,
    [...slotParams(key), end.outcome, end.detail],
  );
}

/** Re-reads one slot row. */
export async function readSlot(db: Queryable, key: SlotKey): Promise<SlotRow | undefined> {
  const result = await db.query<SlotRow>(
    `SELECT * FROM "${SHARD_SLOTS_TABLE}" WHERE ${SLOT_MATCH}`,
    slotParams(key),
  );
  return result.rows[0];
}

/** A task's sharded slots kept: the newest `keep` ended ones and every open one (their shards go with them). */
export async function pruneSlots(db: Queryable, taskName: string, keep: number): Promise<void> {
  await db.query(
    `DELETE FROM "${SHARD_SLOTS_TABLE}" WHERE task_name = $1 AND ended_at IS NOT NULL AND (scheduled_at, round) NOT IN (
       SELECT scheduled_at, round FROM "${SHARD_SLOTS_TABLE}" WHERE task_name = $1 AND ended_at IS NOT NULL
        ORDER BY scheduled_at DESC, round DESC LIMIT $2)`,
    [taskName, keep],
  );
}

import type { Pool } from "pg";
import { type Clock, systemClock } from "../core/clock.js";
import { type Logger, toError } from "../core/logger.js";
import { retryWhileDisconnected } from "../db/retry.js";
import { assignShards } from "./assignment.js";
import { deriveSlotOutcome, type ReduceState, type ShardOutcome, type SlotOutcome } from "./outcome.js";
import { mapItems, type StaticShards, staticParameters, storedJson } from "./shardPlan.js";
import {
  claimReduce,
  endReduce,
  endSlot,
  firstShardStart,
  insertSlot,
  markCoordinator,
  pruneSlots,
  readLatestSlot,
  readSlot,
  type SlotKey,
  type SlotRow,
  selectRegisteredInstances,
  selectShardOutcomes,
  selectShards,
  slotProgress,
} from "./shardSql.js";

/**
 * SlotCoordinator: the "handler" of a sharded task's slot run (docs/sharding.md, "The slot"). The
 * slot stays one ordinary run of the engine (claim, fence, lock keeper, overlap, catch-up,
 * dependencies all apply to it as a whole); its handler here creates the slot's shards if they do
 * not exist yet, waits until every shard has ended (any instance's shard worker runs them,
 * src/sharding/shardWorker.ts), runs the reduce once, and returns the slot's derived outcome.
 *
 * A takeover's coordinator (the run's instance died: the engine's liveness hand-off) finds the
 * stored shards and resumes: it never maps again, never re-runs a finished shard, and claims the
 * reduce only if it is still waiting or its holder is dead (src/sharding/shardSql.ts claimReduce).
 */

/** One shard's end, as the reduce receives it. */
export interface ShardResult {
  index: number;
  /** The shard's parameter (static) or map item. */
  parameter: unknown;
  outcome: ShardOutcome;
  /** What its handler returned (JSON), null when it failed. */
  value: unknown;
  error: string | null;
  /** The instance that ran it. */
  instanceId: string | null;
  attempts: number;
  durationMs: number | null;
}

export type ShardSource =
  | { kind: "static"; shards: StaticShards }
  | { kind: "map"; map: () => Promise<unknown> };

/** One slot run to coordinate (built by the scheduler from the engine's run). */
export interface SlotToCoordinate {
  taskName: string;
  scheduledAt: Date;
  trigger: string;
  /** Fires when the slot run must stop (lock lost, the drain's deadline): the shards stay for the next owner. */
  signal: AbortSignal;
  source: ShardSource;
  reduce?: ((results: ShardResult[]) => Promise<unknown>) | undefined;
  /** The run's logger (its lines go into the slot's run record). */
  logger: Logger;
}

export interface ShardedSlotFinishedEvent extends SlotOutcome {
  taskName: string;
  scheduledAt: Date;
  round: number;
  counts: Record<ShardOutcome, number>;
  /** From the first shard's start to the reduce's end (or the last shard's, without a reduce); null when no shard ran. */
  durationMs: number | null;
}

export interface SlotCoordinatorDeps {
  pool: Pool;
  instanceId: string;
  logger: Logger;
  clock?: Clock;
  /** How often a coordinator reads its slot's progress (a local shard's end wakes it sooner). */
  pollMs?: number;
  /** Ended sharded slots kept per task (their shard rows with them). */
  keepSlots?: number;
  onSlotEnded?: (ended: ShardedSlotFinishedEvent) => void;
}

const PROGRESS_POLL_MS = 500;
/**
 * How long a coordinator's statements are retried while the database is unreachable (a restart, a
 * failover): as long as the run's own rows are (src/engine/runRecorder.ts). The slot run's signal
 * (its lock lost, the drain's deadline) ends the wait sooner.
 */
const DISCONNECTED_RETRY_MS = 10 * 60_000;
const KEEP_SLOTS = 50;
/** Triggers that open a new round of a slot whose shards all ended (an operator asked for it again). */
const NEW_ROUND_TRIGGERS = new Set(["rerun", "backfill", "manual"]);

export class SlotCoordinator {
  readonly #deps: SlotCoordinatorDeps;
  readonly #clock: Clock;
  readonly #waiters = new Map<string, Set<() => void>>();

  constructor(deps: SlotCoordinatorDeps) {
    this.#deps = deps;
    this.#clock = deps.clock ?? systemClock;
  }

  /** A shard of the task ended on this instance: its coordinators here read their progress now. */
  nudge(taskName: string): void {
    for (const wake of this.#waiters.get(taskName) ?? []) wake();
  }

  /**
   * A statement of the slot's, retried while the database is unreachable: each is a read, or a
   * write that is the same when made twice (the slot's insert, the fenced ends); the reduce's claim
   * is read back (#claimReduce). The run's signal stops the retries.
   */
  #db<T>(signal: AbortSignal, operation: () => Promise<T>): Promise<T> {
    return retryWhileDisconnected(
      () => (signal.aborted ? Promise.reject(toError(signal.reason)) : operation()),
      { maxElapsedMs: DISCONNECTED_RETRY_MS, clock: this.#clock },
    );
  }

  /** Coordinates one slot to its end; the derived outcome (the caller fails the run when it failed). */
  async coordinate(slot: SlotToCoordinate): Promise<SlotOutcome> {
    const db = <T>(operation: () => Promise<T>) => this.#db(slot.signal, operation);
    const { pool } = this.#deps;
    const row = await this.#open(slot);
    const key: SlotKey = { taskName: slot.taskName, scheduledAt: slot.scheduledAt, round: row.round };
    if (row.outcome !== null) return { outcome: row.outcome, detail: row.detail ?? "" };
    await this.#untilShardsEnded(key, slot);
    const reduce = await this.#reduce(key, slot);
    const shards = await db(() => selectShardOutcomes(pool, key));
    const derived = deriveSlotOutcome(
      shards.map((shard) => ({
        index: shard.shard_index,
        outcome: shard.state as ShardOutcome,
        error: shard.error,
      })),
      reduce,
    );
    await db(() => endSlot(pool, key, derived));
    const stored = (await db(() => readSlot(pool, key))) ?? row;
    const outcome: SlotOutcome = {
      outcome: stored.outcome ?? derived.outcome,
      detail: stored.detail ?? derived.detail,
    };
    const first = await db(() => firstShardStart(pool, key));
    await this.#ended(
      key,
      stored,
      outcome,
      shards.map((shard) => shard.state as ShardOutcome),
      first,
    );
    return outcome;
  }

  /** The slot's row: the one stored (resumed), or a new one with its shards. */
  async #open(slot: SlotToCoordinate): Promise<SlotRow> {
    const { pool, instanceId } = this.#deps;
    const db = <T>(operation: () => Promise<T>) => this.#db(slot.signal, operation);
    const latest = await db(() => readLatestSlot(pool, slot.taskName, slot.scheduledAt));
    const newRound = latest?.ended_at && NEW_ROUND_TRIGGERS.has(slot.trigger);
    if (latest && !newRound) {
      if (latest.ended_at === null) {
        await db(() =>
          markCoordinator(
            pool,
            { taskName: slot.taskName, scheduledAt: slot.scheduledAt, round: latest.round },
            instanceId,
          ),
        );
        slot.logger.info(
          { round: latest.round, shards: latest.shard_count },
          "sharded slot resumed: its stored shards are coordinated here",
        );
      }
      return latest;
    }
    const round = (latest?.round ?? 0) + 1;
    const parameters =
      slot.source.kind === "static"
        ? staticParameters(slot.source.shards).map((value, index) =>
            storedJson(`shardParameters[${index}] of task "${slot.taskName}"`, value),
          )
        : mapItems(slot.taskName, await slot.source.map());
    const instances = await db(() => selectRegisteredInstances(pool));
    const assigned = assignShards(slot.taskName, parameters.length, instances);
    // the insert is made once however often it is sent (ON CONFLICT DO NOTHING)
    await db(async () => {
      const client = await pool.connect();
      try {
        await insertSlot(client, {
          taskName: slot.taskName,
          scheduledAt: slot.scheduledAt,
          round,
          source: slot.source.kind,
          trigger: slot.trigger,
          openedBy: instanceId,
          hasReduce: slot.reduce !== undefined,
          parameters,
          assigned,
        });
      } finally {
        client.release();
      }
    });
    const stored = await db(() => readLatestSlot(pool, slot.taskName, slot.scheduledAt));
    if (!stored)
      throw new Error(
        `the sharded slot of "${slot.taskName}" at ${slot.scheduledAt.toISOString()} was not stored`,
      );
    slot.logger.info(
      { round: stored.round, shards: stored.shard_count, source: stored.source },
      `sharded slot opened: ${stored.shard_count} shard(s)`,
    );
    return stored;
  }

  /** Waits until no shard of the slot is queued or running; the run's signal ends the wait (thrown). */
  async #untilShardsEnded(key: SlotKey, slot: SlotToCoordinate): Promise<void> {
    for (;;) {
      const progress = await this.#db(slot.signal, () => slotProgress(this.#deps.pool, key));
      if ((progress.queued ?? 0) + (progress.running ?? 0) === 0) return;
      if (slot.signal.aborted) throw toError(slot.signal.reason);
      await this.#pause(key.taskName, slot.signal);
    }
  }

  /** Sleeps one poll, or less when a local shard of the task ends or the signal fires. */
  async #pause(taskName: string, signal: AbortSignal): Promise<void> {
    const waiters = this.#waiters.get(taskName) ?? new Set<() => void>();
    this.#waiters.set(taskName, waiters);
    const local = new AbortController();
    const wake = () => local.abort();
    const forward = () => local.abort();
    waiters.add(wake);
    signal.addEventListener("abort", forward, { once: true });
    try {
      await this.#clock.sleep(this.#deps.pollMs ?? PROGRESS_POLL_MS, local.signal).catch(() => {});
    } finally {
      waiters.delete(wake);
      signal.removeEventListener("abort", forward);
      if (waiters.size === 0) this.#waiters.delete(taskName);
    }
  }

  /** The reduce, once: claimed, run and ended here, or already ended (or going on a live instance: waited for). */
  async #reduce(key: SlotKey, slot: SlotToCoordinate): Promise<{ state: ReduceState; error: string | null }> {
    const { pool } = this.#deps;
    for (;;) {
      const row = await this.#db(slot.signal, () => readSlot(pool, key));
      if (
        !row ||
        row.reduce_state === "none" ||
        row.reduce_state === "succeeded" ||
        row.reduce_state === "failed"
      )
        return { state: row?.reduce_state ?? "none", error: row?.reduce_error ?? null };
      if (!slot.reduce) return { state: "none", error: null };
      if (await this.#claimReduce(key, slot.signal)) return this.#runReduce(key, slot, slot.reduce);
      if (slot.signal.aborted) throw toError(slot.signal.reason);
      await this.#pause(key.taskName, slot.signal);
    }
  }

  /**
   * The reduce's claim, retried while the database is unreachable: a claim whose answer was lost is
   * read back (the slot's reduce running, held by this instance), so it is neither lost nor made twice.
   */
  async #claimReduce(key: SlotKey, signal: AbortSignal): Promise<boolean> {
    const { pool, instanceId } = this.#deps;
    let unanswered = false;
    return this.#db(signal, async () => {
      if (unanswered) {
        const row = await readSlot(pool, key);
        if (row?.reduce_state === "running" && row.reduce_holder === instanceId) return true;
      }
      try {
        return await claimReduce(pool, key, instanceId);
      } catch (error) {
        unanswered = true;
        throw error;
      }
    });
  }

  async #runReduce(
    key: SlotKey,
    slot: SlotToCoordinate,
    reduce: (results: ShardResult[]) => Promise<unknown>,
  ): Promise<{ state: ReduceState; error: string | null }> {
    const shards = await this.#db(slot.signal, () => selectShards(this.#deps.pool, key));
    const results: ShardResult[] = shards.map((shard) => ({
      index: shard.shard_index,
      parameter: shard.parameter,
      outcome: shard.state as ShardOutcome,
      value: shard.result ?? null,
      error: shard.error,
      instanceId: shard.holder,
      attempts: shard.attempts,
      durationMs: shard.duration_ms,
    }));
    let end: { state: "succeeded" | "failed"; error: string | null };
    try {
      const value = await reduce(results);
      if (value !== undefined) slot.logger.info({ result: value }, "reduce returned");
      end = { state: "succeeded", error: null };
    } catch (error) {
      end = { state: "failed", error: toError(error).message };
      slot.logger.error({ err: toError(error) }, `reduce failed: ${end.error}`);
    }
    if (slot.signal.aborted) throw toError(slot.signal.reason); // the next owner runs the reduce again
    await this.#db(slot.signal, () => endReduce(this.#deps.pool, key, this.#deps.instanceId, end));
    return end;
  }

  async #ended(
    key: SlotKey,
    row: SlotRow,
    outcome: SlotOutcome,
    states: ShardOutcome[],
    first: Date | null,
  ): Promise<void> {
    const counts: Record<ShardOutcome, number> = { succeeded: 0, failed: 0, skipped: 0 };
    for (const state of states) counts[state] = (counts[state] ?? 0) + 1;
    const end = row.reduce_ended_at ?? row.ended_at;
    await pruneSlots(this.#deps.pool, key.taskName, this.#deps.keepSlots ?? KEEP_SLOTS).catch(
      (error: unknown) =>
        this.#deps.logger.warn(
          { err: toError(error), task: key.taskName },
          "sharded slots: prune failed; retried at the next slot",
        ),
    );
    this.#deps.onSlotEnded?.({
      taskName: key.taskName,
      scheduledAt: key.scheduledAt,
      round: key.round,
      ...outcome,
      counts,
      durationMs: first && end ? Math.max(0, end.getTime() - first.getTime()) : null,
    });
  }
}

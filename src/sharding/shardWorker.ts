import type { Pool } from "pg";
import { type Clock, type ClockTimer, systemClock } from "../core/clock.js";
import { type Logger, toError } from "../core/logger.js";
import { retryWhileDisconnected } from "../db/retry.js";
import type { ShardOutcome } from "./outcome.js";
import { runShardAttempts, type ShardRun, type ShardTaskPolicy } from "./shardExecution.js";
import { ShardListener } from "./shardListener.js";
import {
  type ClaimedShardRow,
  claimShards,
  endShard,
  type HeldShard,
  notifyShards,
  releaseShards,
  renewShardLeases,
  selectOpenShardTasks,
  slotHasOpenShards,
} from "./shardSql.js";

/**
 * ShardWorker: every instance's taker of shards (docs/sharding.md, "Running shards"). It claims
 * shards with `FOR UPDATE SKIP LOCKED` (src/sharding/shardSql.ts claimShards), at most
 * `concurrency` at once, runs each one's attempts (src/sharding/shardExecution.ts), renews their
 * leases every third of a lease, and writes each end fenced on its claim.
 *
 * When it looks: when a slot's shards are announced (NOTIFY, src/sharding/shardListener.ts), when one
 * of its shards ends, and every `pollMs` while any shard of a task it runs is queued or running
 * anywhere (a dead instance's shards become claimable when the liveness check forgets it, which
 * nobody announces). With no open shard it sends nothing: the idle load stays the engine's.
 */

export interface ShardFinishedEvent {
  taskName: string;
  scheduledAt: Date;
  index: number;
  outcome: ShardOutcome;
  attempts: number;
  durationMs: number;
  error?: string;
}

export interface ShardWorkerDeps {
  pool: Pool;
  instanceId: string;
  logger: Logger;
  clock?: Clock;
  /** Shards run at once on this instance (the scheduler's maxConcurrency). */
  concurrency: number;
  /** A claimed shard's lease: renewed every third; a lapsed lease makes the shard claimable again. */
  leaseMs: number;
  /** How long an idle worker waits before it takes the queued shards of an instance that is behind. */
  stealAfterMs?: number;
  /** The poll while open shards exist. */
  pollMs?: number;
  /** The task's shard policy, or undefined when this instance does not run the task's shards. */
  policyOf: (taskName: string) => ShardTaskPolicy | undefined;
  /** Calls the task's handler for one attempt of one shard; its value is the shard's result. */
  execute: (run: ShardRun) => Promise<unknown>;
  onShardEnded?: (ended: ShardFinishedEvent) => void;
  /** Lets the coordinator on this instance hear of a shard that ended here at once. */
  onLocalEnd?: (taskName: string) => void;
  /** A NOTIFY for a task's shards: new ones, or the last of a slot ended (its coordinator reads its progress). */
  onNotify?: (taskName: string) => void;
}

export const STEAL_AFTER_MS = 1_000;
export const OPEN_POLL_MS = 500;
/** How long a shard's end is retried while the database is unreachable (as the run's own rows are). */
const END_RETRY_MS = 10 * 60_000;

interface Running {
  held: HeldShard;
  stop: AbortController;
  done: Promise<void>;
}

export class ShardWorker {
  readonly #deps: ShardWorkerDeps;
  readonly #clock: Clock;
  readonly #listener: ShardListener;
  readonly #running = new Map<string, Running>();
  #passing: Promise<void> | undefined;
  #again = false;
  #pollTimer: ClockTimer | undefined;
  #leaseTimer: ClockTimer | undefined;
  #lastClaimAt = Number.NEGATIVE_INFINITY;
  #started = false;
  #stopping = false;

  constructor(deps: ShardWorkerDeps) {
    this.#deps = deps;
    this.#clock = deps.clock ?? systemClock;
    this.#listener = new ShardListener({
      pool: deps.pool,
      logger: deps.logger,
      clock: this.#clock,
      onNotify: (taskName) => {
        this.wake();
        deps.onNotify?.(taskName);
      },
    });
  }

  /** The shards this instance runs now. */
  get running(): number {
    return this.#running.size;
  }

  async start(): Promise<void> {
    this.#started = true;
    await this.#listener.start();
    this.#leaseTimer = this.#clock.setInterval(
      () => void this.#renew(),
      Math.max(50, this.#deps.leaseMs / 3),
    );
    this.#leaseTimer.unref();
    this.wake();
  }

  /** A claim pass soon (passes never overlap; a wake during one makes one more). */
  wake(): void {
    if (!this.#started || this.#stopping) return;
    if (this.#passing) {
      this.#again = true;
      return;
    }
    this.#passing = this.#pass()
      .catch((error: unknown) => {
        this.#deps.logger.warn({ err: toError(error) }, "shard worker: claim pass failed; polling");
        this.#pollSoon();
      })
      .finally(() => {
        this.#passing = undefined;
        if (this.#again) {
          this.#again = false;
          this.wake();
        }
      });
  }

  /**
   * Stops claiming, waits for the running shards until `timeoutMs`, then cuts the rest off and gives
   * them back to the queue for another instance (fenced on their claim).
   */
  async drain(timeoutMs: number): Promise<void> {
    this.#stopping = true;
    this.#clock.clearTimeout(this.#pollTimer);
    await this.#passing;
    const all = Promise.all([...this.#running.values()].map((running) => running.done));
    // the deadline's timer is cleared once the shards end: a pending one would keep the process alive
    const deadline = new AbortController();
    await Promise.race([all, this.#clock.sleep(timeoutMs, deadline.signal).catch(() => {})]);
    deadline.abort();
    const left = [...this.#running.values()];
    for (const running of left) running.stop.abort(new Error("cut off at shutdown"));
    await releaseShards(
      this.#deps.pool,
      this.#deps.instanceId,
      left.map((running) => running.held),
    ).catch((error: unknown) =>
      this.#deps.logger.warn(
        { err: toError(error) },
        "shard worker: could not give shards back; their lease lapses",
      ),
    );
    await all;
    this.#clock.clearInterval(this.#leaseTimer);
    await this.#listener.stop();
  }

  async #pass(): Promise<void> {
    const { pool, instanceId, concurrency, leaseMs } = this.#deps;
    const room = concurrency - this.#running.size;
    if (room <= 0 || this.#stopping) return;
    const tasks = (await selectOpenShardTasks(pool)).filter(
      (task) => this.#deps.policyOf(task) !== undefined,
    );
    if (tasks.length === 0) {
      // nothing open: the next NOTIFY wakes it (while the LISTEN session is down, the poll does)
      if (!this.#listener.listening) this.#pollSoon();
      return;
    }
    const stealAfterMs = this.#deps.stealAfterMs ?? STEAL_AFTER_MS;
    const claimed = await claimShards(pool, {
      instanceId,
      tasks,
      limit: room,
      leaseMs,
      steal: this.#clock.monotonic() - this.#lastClaimAt >= stealAfterMs,
      stealAfterMs,
    });
    if (claimed.length > 0) this.#lastClaimAt = this.#clock.monotonic();
    for (const row of claimed) this.#start(row);
    this.#pollSoon();
  }

  #pollSoon(): void {
    if (this.#pollTimer || this.#stopping) return;
    this.#pollTimer = this.#clock.setTimeout(() => {
      this.#pollTimer = undefined;
      this.wake();
    }, this.#deps.pollMs ?? OPEN_POLL_MS);
    this.#pollTimer.unref();
  }

  #start(row: ClaimedShardRow): void {
    const held: HeldShard = {
      taskName: row.task_name,
      scheduledAt: row.scheduled_at,
      round: row.round,
      index: row.shard_index,
      runs: row.runs,
    };
    const key = `${held.taskName}\u0000${held.scheduledAt.toISOString()}\u0000${held.round}\u0000${held.index}`;
    const stop = new AbortController();
    const running: Running = { held, stop, done: Promise.resolve() };
    this.#running.set(key, running);
    running.done = this.#run(row, held, stop.signal)
      .catch((error: unknown) =>
        this.#deps.logger.error(
          { err: toError(error), task: held.taskName, shard: held.index },
          "shard worker: shard end not written",
        ),
      )
      .finally(() => {
        this.#running.delete(key);
        this.wake();
      });
  }

  async #run(row: ClaimedShardRow, held: HeldShard, stop: AbortSignal): Promise<void> {
    const deps = this.#deps;
    const policy = deps.policyOf(held.taskName) ?? {};
    const ended = await runShardAttempts({
      run: {
        taskName: held.taskName,
        scheduledAt: held.scheduledAt,
        round: held.round,
        index: held.index,
        count: row.shard_count,
        parameter: row.parameter,
        trigger: row.trigger,
        rerun: row.previous_holder !== null,
      },
      policy,
      execute: deps.execute,
      stop,
      clock: this.#clock,
    });
    if (ended.abandoned !== undefined) return; // its lease lost or cut off: another instance runs it
    // retried while the database is unreachable: fenced on this claim, so a late write of an end
    // the lease lost meanwhile is refused, and the taker's outcome counts
    const written = await retryWhileDisconnected(() => endShard(deps.pool, deps.instanceId, held, ended), {
      maxElapsedMs: END_RETRY_MS,
      clock: this.#clock,
    });
    // the slot's last shards: the one whose read after its own commit finds none open announces
    // it (of two ending at once, the later read sees both ended), so the coordinator, on whichever
    // instance, goes on to the reduce at once instead of at its next poll
    if (written === "tail" && !(await slotHasOpenShards(deps.pool, held).catch(() => true)))
      await notifyShards(deps.pool, held.taskName).catch(() => {});
    if (written === "taken") {
      deps.logger.warn(
        { task: held.taskName, shard: held.index },
        "shard worker: the shard was taken over before its end was written; the taker's outcome counts",
      );
      return;
    }
    deps.onLocalEnd?.(held.taskName);
    deps.onShardEnded?.({
      taskName: held.taskName,
      scheduledAt: held.scheduledAt,
      index: held.index,
      outcome: ended.outcome,
      attempts: ended.attempts,
      durationMs: ended.durationMs,
      ...(ended.error ? { error: ended.error } : {}),
    });
  }

  /** Renews the leases of the shards running here; a shard whose lease was taken is stopped (not recorded). */
  async #renew(): Promise<void> {
    const running = [...this.#running.values()];
    if (running.length === 0) return;
    try {
      const kept = await renewShardLeases(
        this.#deps.pool,
        this.#deps.instanceId,
        this.#deps.leaseMs,
        running.map((entry) => entry.held),
      );
      const keys = new Set(
        kept.map(
          (shard) =>
            `${shard.taskName}|${shard.scheduledAt.getTime()}|${shard.round}|${shard.index}|${shard.runs}`,
        ),
      );
      for (const entry of running) {
        const { taskName, scheduledAt, round, index, runs } = entry.held;
        if (
          keys.has(`${taskName}|${scheduledAt.getTime()}|${round}|${index}|${runs}`) ||
          entry.stop.signal.aborted
        )
          continue;
        this.#deps.logger.warn(
          { task: taskName, shard: index },
          "shard worker: lease lost (another instance took the shard); stopping it here",
        );
        entry.stop.abort(new Error("lease lost"));
      }
    } catch (error) {
      this.#deps.logger.warn(
        { err: toError(error) },
        "shard worker: lease renewal failed; retrying at the next renewal",
      );
    }
  }
}

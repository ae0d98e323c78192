import type { EventEmitter } from "node:events";
import type { Pool } from "pg";
import type { DesiredState } from "../config/desiredState.js";
import type { Clock } from "../core/clock.js";
import type { Logger } from "../core/logger.js";
import { type EngineRun, runTriggerOf } from "../engine/engineApi.js";
import type { ShardRun } from "../sharding/shardExecution.js";
import type { StaticShards } from "../sharding/shardPlan.js";
import {
  type ShardProgressQuery,
  type SlotProgress,
  selectShardProgress,
} from "../sharding/shardProgress.js";
import {
  readLatestSlot,
  readSlot,
  type ShardRow,
  type SlotKey,
  type SlotRow,
  selectShards,
} from "../sharding/shardSql.js";
import { ShardWorker } from "../sharding/shardWorker.js";
import { type ShardSource, SlotCoordinator } from "../sharding/slotCoordinator.js";
import type { SchedulerEvents } from "./events.js";
import type { RunReporter } from "./runReporter.js";
import type { RegisteredTask, TaskRegistry } from "./taskRegistry.js";

/**
 * The scheduler's sharded tasks (docs/sharding.md): which tasks are sharded (a registered `map`, or
 * `shards:` in the config entry in force), the slot run's handler for them (the coordinator,
 * src/sharding/slotCoordinator.ts) and this instance's shard worker (src/sharding/shardWorker.ts),
 * whose shards call the task's handler through the RunReporter with `ctx.shard` set.
 */
export class ShardedTasks {
  readonly #deps: ShardedTasksDeps;
  readonly #coordinator: SlotCoordinator;
  readonly #worker: ShardWorker;
  /** Each task's `shards:` from the config in force here. */
  #static = new Map<string, StaticShards>();

  constructor(deps: ShardedTasksDeps) {
    this.#deps = deps;
    const { pool, instanceId, clock, logger, emitter } = deps;
    this.#coordinator = new SlotCoordinator({
      pool,
      instanceId,
      clock,
      logger,
      onSlotEnded: (ended) => emitter.emit("sharded-slot:finished", ended),
    });
    this.#worker = new ShardWorker({
      pool,
      instanceId,
      clock,
      logger,
      concurrency: deps.concurrency,
      leaseMs: deps.leaseMs,
      policyOf: (taskName) => {
        const task = deps.registry.get(taskName);
        return task ? { timeoutMs: deps.timeoutOf(taskName), retry: task.retry } : undefined;
      },
      execute: (run) => this.#runShard(run),
      onShardEnded: (ended) => emitter.emit("shard:finished", ended),
      onLocalEnd: (taskName) => this.#coordinator.nudge(taskName),
      onNotify: (taskName) => this.#coordinator.nudge(taskName),
    });
  }

  /** The config in force: which tasks have static shards (applies from each task's next slot). */
  applyConfig(state: DesiredState): void {
    const shards = new Map<string, StaticShards>();
    for (const task of state.tasks)
      if (task.shards !== undefined)
        shards.set(task.name, {
          count: task.shards,
          ...(task.shardParameters === undefined ? {} : { parameters: task.shardParameters }),
        });
    this.#static = shards;
  }

  isSharded(task: RegisteredTask): boolean {
    return task.map !== undefined || this.#static.has(task.name);
  }

  /** A slot run's handler: the coordinator for a sharded task, else the task's own handler. */
  async run(task: RegisteredTask, run: EngineRun): Promise<void> {
    const { reporter } = this.#deps;
    const fixed = this.#static.get(task.name);
    if (task.map === undefined && fixed === undefined) {
      await reporter.run(task, run);
      return;
    }
    if (task.module && task.module.mode !== "none")
      throw new Error(
        `task "${task.name}" has \`shards\` in its config entry but runs isolated (${task.module.mode}); a sharded task runs its shards in-process: remove \`shards\` from the entry or the task's isolation`,
      );
    const context = await reporter.contextOf(task, run);
    const { map, reduce } = task;
    const source: ShardSource = map
      ? { kind: "map", map: async () => map(context) }
      : { kind: "static", shards: fixed as StaticShards };
    const outcome = await this.#coordinator.coordinate({
      taskName: task.name,
      scheduledAt: run.scheduledAt,
      trigger: run.trigger,
      signal: run.signal,
      source,
      reduce: reduce ? async (results) => reduce(context, results) : undefined,
      logger: context.logger,
    });
    if (outcome.outcome === "failed") throw new Error(`sharded slot failed: ${outcome.detail}`);
    context.logger.info(`sharded slot: ${outcome.detail}`);
  }

  start(): Promise<void> {
    return this.#worker.start();
  }

  /** Stops taking shards; the running ones end (or are given back at the deadline). */
  drain(timeoutMs: number): Promise<void> {
    return this.#worker.drain(timeoutMs);
  }

  /** A slot's shards (the latest round, or the one asked), for the admin API and the CLI. */
  async shards(
    taskName: string,
    scheduledAt: Date,
    round?: number,
  ): Promise<{ slot: SlotRow; shards: ShardRow[] } | undefined> {
    const latest = await readLatestSlot(this.#deps.pool, taskName, scheduledAt);
    if (!latest) return undefined;
    const key: SlotKey = { taskName, scheduledAt, round: round ?? latest.round };
    const slot = round === undefined ? latest : await readSlot(this.#deps.pool, key);
    return slot && { slot, shards: await selectShards(this.#deps.pool, key) };
  }

  /** The shard progress of the sharded slots in a range (the dashboard's timeline). */
  progress(query: ShardProgressQuery): Promise<SlotProgress[]> {
    return selectShardProgress(this.#deps.pool, query);
  }

  /** One shard attempt: the task's handler with `ctx.shard`, through the reporter (logs, secrets). */
  async #runShard(shard: ShardRun): Promise<unknown> {
    const task = this.#deps.registry.get(shard.taskName);
    if (!task) throw new Error(`task "${shard.taskName}" is not registered on this instance`);
    const run: EngineRun = {
      taskName: shard.taskName,
      jobId: "",
      scheduledAt: shard.scheduledAt,
      startedAt: shard.startedAt,
      attempt: shard.attempt,
      trigger: runTriggerOf(shard.trigger),
      signal: shard.signal,
      rerunOf: undefined,
    };
    return this.#deps.reporter.run(task, run, {
      index: shard.index,
      count: shard.count,
      parameter: shard.parameter,
    });
  }
}

export interface ShardedTasksDeps {
  pool: Pool;
  instanceId: string;
  clock: Clock;
  logger: Logger;
  registry: TaskRegistry;
  reporter: RunReporter;
  emitter: Pick<EventEmitter<SchedulerEvents>, "emit">;
  concurrency: number;
  leaseMs: number;
  /** A task's timeout in force (the config may lower the code's): each shard's. */
  timeoutOf: (taskName: string) => number | undefined;
}

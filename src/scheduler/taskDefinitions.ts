import type { EventEmitter } from "node:events";
import type { Pool } from "pg";
import type { DesiredState } from "../config/desiredState.js";
import type { Clock } from "../core/clock.js";
import type { Logger } from "../core/logger.js";
import type { AgendaEngine, RunHandler } from "../engine/agendaEngine.js";
import type { EngineRun } from "../engine/engineApi.js";
import { ModuleHandlers } from "../isolation/moduleHandlers.js";
import { boundsOf, describeLimitProblems, type Limits, TaskLimits } from "../isolation/taskLimits.js";
import type { ReconcileTrigger } from "../reconcile/configReconciler.js";
import type { SchedulerEvents } from "./events.js";
import type { RunReporter } from "./runReporter.js";
import { ShardedTasks } from "./shardedTasks.js";
import type { TaskRegistration } from "./taskDefinition.js";
import type { RegisteredTask, TaskRegistry } from "./taskRegistry.js";

/**
 * What each registered task is defined with in the engine: its retry, and its timeout and heap
 * limit in force (the code's, lowered by the config: docs/isolation.md), plus the handlers tasks
 * name by module and the warm hosts of isolated ones. An isolated task's timeout is its host's to
 * enforce, hard (src/isolation/isolatedRun.ts); an in-process task's follows the limits in force.
 */
export class TaskDefinitions {
  readonly modules: ModuleHandlers;
  readonly #registry: TaskRegistry;
  readonly #logger: Logger;
  #limits: TaskLimits | undefined;
  /** The options object each task is defined with (the engine keeps it: a lowered timeout applies to the next run). */
  readonly #options = new Map<string, { retry: TaskRegistration["retry"]; timeoutMs: number | undefined }>();

  readonly #deps: TaskDefinitionsDeps;
  /** Sharded tasks (docs/sharding.md): set by define(), which has the reporter their shards run through. */
  #sharded: ShardedTasks | undefined;

  constructor(deps: TaskDefinitionsDeps) {
    this.#deps = deps;
    this.#registry = deps.registry;
    this.#logger = deps.logger;
    this.modules = new ModuleHandlers({ logger: deps.logger, graceMs: deps.settings.timeoutGraceMs });
  }

  /** A slot run of a task: its handler, or for a sharded task its slot's coordinator (src/scheduler/shardedTasks.ts). */
  async run(task: RegisteredTask, run: EngineRun, reporter: RunReporter): Promise<void> {
    if (this.#sharded) await this.#sharded.run(task, run);
    else await reporter.run(task, run);
  }

  /** The shard worker, started after the engine and drained beside it (Scheduler stop()). */
  get sharded(): ShardedTasks | undefined {
    return this.#sharded;
  }

  /** The limits in force for a task (undefined before define()). */
  limitsOf(taskName: string): Limits | undefined {
    return this.#limits?.of(taskName);
  }

  /** Defines every registered task in the engine, and warms one host per isolated handler's pool. */
  define(engine: AgendaEngine, run: RunHandler, reporter: RunReporter): void {
    const tasks = this.#registry.list();
    this.#limits = new TaskLimits(boundsOf(tasks));
    const { pool, instanceId, clock, emitter, settings } = this.#deps;
    this.#sharded = new ShardedTasks({
      pool,
      instanceId,
      clock,
      logger: this.#logger,
      registry: this.#registry,
      reporter,
      emitter,
      concurrency: settings.maxConcurrency,
      leaseMs: settings.lockLifetimeMs,
      timeoutOf: (name) => this.limitsOf(name)?.timeoutMs ?? this.#registry.get(name)?.timeoutMs,
    });
    for (const task of tasks) {
      const options = this.#engineOptions(task);
      this.#options.set(task.name, options);
      engine.defineTask(task.name, run, options);
    }
    // its first run costs no cold start
    this.modules.warm(tasks.flatMap((task) => (task.module ? [{ ...task, module: task.module }] : [])));
  }

  /**
   * A snapshot's timeouts and heap limits, where they lower the code's (src/isolation/taskLimits.ts);
   * one that would raise them is refused with the reason, and the task keeps its limits.
   */
  applyLimits(
    state: DesiredState,
    trigger: ReconcileTrigger,
    emitter: Pick<EventEmitter<SchedulerEvents>, "emit">,
  ): void {
    const limits = this.#limits;
    if (!limits) return;
    const requests = new Map(state.tasks.map((task) => [task.name, task]));
    const refused = new Set(
      state.rejected.flatMap((entry) => (entry.name === undefined ? [] : [entry.name])),
    );
    for (const [taskName, problems] of limits.apply(requests, refused)) {
      if (trigger === "anti-entropy") continue;
      const reason = describeLimitProblems(taskName, problems, limits.of(taskName));
      this.#logger.error({ task: taskName, revision: state.revision }, reason);
      emitter.emit("config:rejected", { taskName, reason, revision: state.revision });
    }
    this.#sharded?.applyConfig(state);
    for (const [name, options] of this.#options) {
      const task = this.#registry.get(name);
      if (task) Object.assign(options, this.#engineOptions(task));
    }
  }

  /**
   * A task's engine options: its retry and the timeout in force; none for a sharded task, whose
   * slot run is its coordinator (its shards have them, each: src/sharding/shardExecution.ts).
   */
  #engineOptions(task: RegisteredTask): { retry: TaskRegistration["retry"]; timeoutMs: number | undefined } {
    if (this.#sharded?.isSharded(task)) return { retry: undefined, timeoutMs: undefined };
    const timeoutMs = this.#limits?.of(task.name).timeoutMs ?? task.timeoutMs;
    return { retry: task.retry, timeoutMs: isolated(task) ? undefined : timeoutMs };
  }

  /** Ends the isolated handlers' hosts (after the drain). */
  close(): void {
    this.modules.close();
  }
}

/** A task whose handler runs in a worker thread or a child process. */
function isolated(task: RegisteredTask): boolean {
  return task.module !== undefined && task.module.mode !== "none";
}

export interface TaskDefinitionsDeps {
  registry: TaskRegistry;
  logger: Logger;
  pool: Pool;
  instanceId: string;
  clock: Clock;
  emitter: Pick<EventEmitter<SchedulerEvents>, "emit">;
  /** `timeoutGraceMs`: how long an isolated handler that ignores its timeout keeps its host. */
  settings: { maxConcurrency: number; lockLifetimeMs: number; timeoutGraceMs: number };
}

import type { EventEmitter } from "node:events";
import { capturingLogger } from "../core/capturingLogger.js";
import { isoTime } from "../core/isoTime.js";
import type { Logger } from "../core/logger.js";
import type { EngineHooks, EngineRun } from "../engine/engineApi.js";
import type { ModuleHandlers } from "../isolation/moduleHandlers.js";
import { readSecrets } from "../isolation/secretSource.js";
import type { Limits } from "../isolation/taskLimits.js";
import { redactSecrets } from "../observability/redact.js";
import type { RunStartedEvent, SchedulerEvents } from "./events.js";
import type { ShardInfo, TaskContext } from "./taskDefinition.js";
import type { RegisteredTask } from "./taskRegistry.js";

/**
 * Between the engine and task code: builds each handler's TaskContext, and turns what the engine
 * reports about runs into log lines and the scheduler's typed events.
 */
export class RunReporter {
  readonly #events: EventEmitter<SchedulerEvents>;
  readonly #logger: Logger;
  readonly #instanceId: string;
  /** One child logger per attempt (its start, its handler and its end log through it). */
  readonly #runLoggers = new WeakMap<EngineRun, Logger>();

  readonly #modules: ModuleHandlers;
  readonly #limitsOf: (taskName: string) => Limits | undefined;

  constructor(
    events: EventEmitter<SchedulerEvents>,
    logger: Logger,
    instanceId: string,
    modules: ModuleHandlers,
    /** The timeout and heap limit in force (the config may lower the code's: docs/isolation.md). */
    limitsOf: (taskName: string) => Limits | undefined,
  ) {
    this.#events = events;
    this.#logger = logger;
    this.#instanceId = instanceId;
    this.#modules = modules;
    this.#limitsOf = limitsOf;
  }

  /**
   * Runs a task's handler for one attempt of one slot: its function, or its module's export in the
   * task's isolation (docs/isolation.md), whose return value is logged to the run record.
   */
  async run(task: RegisteredTask, run: EngineRun, shard?: ShardInfo): Promise<unknown> {
    const context = await this.contextOf(task, run, shard);
    const { secrets } = context;
    if (task.handler) return await task.handler(context);
    if (!task.module) throw new Error(`task "${task.name}" has neither a handler nor a module`);
    const limits = this.#limitsOf(task.name);
    const module = { ...task.module, memoryLimitMb: limits?.memoryLimitMb ?? task.module.memoryLimitMb };
    const timeoutMs = limits ? limits.timeoutMs : task.timeoutMs;
    const value = await this.#modules.run({ ...task, module, timeoutMs }, context, secrets);
    if (value !== undefined) context.logger.info({ result: value }, "handler returned");
    return value;
  }

  /** A run's TaskContext (a sharded task's map and reduce get their slot run's; a shard, its own). */
  async contextOf(task: RegisteredTask, run: EngineRun, shard?: ShardInfo): Promise<TaskContext> {
    // read at each run: a rotated secret needs no restart (src/isolation/secretSource.ts)
    const secrets = await readSecrets(task.name, task.secrets);
    return {
      taskName: task.name,
      scheduledAt: run.scheduledAt,
      startedAt: run.startedAt,
      attempt: run.attempt,
      signal: run.signal,
      instanceId: this.#instanceId,
      runKey: `${task.name}@${isoTime(run.scheduledAt)}`,
      rerunOf: run.rerunOf,
      upstreams: run.upstreams ?? [],
      logger: run.journal ? capturingLogger(this.#runLogger(run), run.journal) : this.#runLogger(run),
      trigger: run.trigger,
      secrets,
      ...(shard ? { shard } : {}),
    };
  }

  /** The engine hooks, except the missed-slot one (it is not about a run). */
  hooks(): Omit<EngineHooks, "missedSlot"> {
    const events = this.#events;
    return {
      slotLocked: (taskName, scheduledAt) => events.emit("slot:locked", { taskName, scheduledAt }),
      runStarted: (run) => {
        const logger = this.#runLogger(run);
        if (run.rerunOf) {
          logger.warn(
            { rerunOf: run.rerunOf },
            `run started: a re-run of the run started at ${run.rerunOf.startedAt.toISOString()} by ${run.rerunOf.instanceId ?? "an unknown instance"}, which never finished`,
          );
        } else {
          logger.info("run started");
        }
        events.emit("run:started", this.#describe(run));
      },
      runFinished: (run, result) => {
        const { durationMs, outcome, error } = result;
        const logger = this.#runLogger(run);
        // an interrupted run was logged by the engine as it was handed off, a lock-lost one as it lost the lock
        if (outcome === "interrupted" || outcome === "lock-lost")
          logger.debug({ durationMs, outcome }, `run ${outcome}`);
        else if (error)
          logger.error(
            { err: error, durationMs, outcome },
            `run failed after ${durationMs} ms: ${redactSecrets(error.message)}`,
          );
        else logger.info({ durationMs, outcome }, `run succeeded in ${durationMs} ms`);
        events.emit("run:finished", {
          ...this.#describe(run),
          outcome,
          durationMs,
          final: result.final,
          ...(error ? { error } : {}),
        });
      },
      retryScheduled: (run, error, delayMs) => {
        this.#runLogger(run).warn(
          { err: error, delayMs },
          `attempt ${run.attempt} failed; retry in ${delayMs} ms`,
        );
        events.emit("run:retry", { ...this.#describe(run), error, delayMs });
      },
      lockRenewed: (taskName) => events.emit("lock:renewed", { taskName }),
      lockLost: (run, reason) => events.emit("run:lock-lost", { ...this.#describe(run), reason }),
      eventLoopStalled: (stall) => events.emit("event-loop:stall", stall),
      abandoned: (run, reason) => events.emit("run:abandoned", { ...this.#describe(run), reason }),
      dependencyWaitOpened: (taskName, scheduledAt) =>
        events.emit("dependency:wait", { taskName, scheduledAt }),
      dependencyDecided: (decision) => events.emit("dependency:decided", decision),
    };
  }

  #describe(run: EngineRun): RunStartedEvent {
    return {
      taskName: run.taskName,
      scheduledAt: run.scheduledAt,
      startedAt: run.startedAt,
      instanceId: this.#instanceId,
      attempt: run.attempt,
      trigger: run.trigger,
      ...(run.requestedBy === undefined ? {} : { requestedBy: run.requestedBy }),
      rerun: run.rerunOf !== undefined,
    };
  }

  #runLogger(run: EngineRun): Logger {
    let logger = this.#runLoggers.get(run);
    if (!logger) {
      logger = this.#logger.child({
        task: run.taskName,
        slot: isoTime(run.scheduledAt),
        attempt: run.attempt,
      });
      this.#runLoggers.set(run, logger);
    }
    return logger;
  }
}

import { EventEmitter } from "node:events";
import { hostname } from "node:os";
import type { Pool } from "pg";
import { type Clock, clockDate, systemClock } from "../core/clock.js";
import type { AgendaEngine, ChainSlot, RunRecord, TaskJob } from "../engine/agendaEngine.js";
import type { RunHandler } from "../engine/engineApi.js";
import type { ReconcileResult } from "../reconcile/configReconciler.js";
import type { ConfigSource } from "../sources/configSource.js";
import { type HistoryPage, type RunDetail, readHistory, readRunDetail } from "../status/runHistory.js";
import { readTimeline, type TimelinePage, type TimelineQuery } from "../status/timeline.js";
import type { HistoryQuery } from "../status/timelineSql.js";
import { AuditLog, type AuditRecord } from "../store/auditLog.js";
import { DesiredStateStore } from "../store/desiredStateStore.js";
import type { SchedulerEvents } from "./events.js";

export type * from "./events.js";

import type { DesiredState } from "../config/desiredState.js";
import { CronwardenError } from "../core/errors.js";
import { createLogger, type Logger, redactingChild } from "../core/logger.js";
import { ListenerFailures, safeEmit } from "../core/safeEmit.js";
import { registerSecret, registerUrlPassword } from "../observability/redact.js";
import { readRunSummaries, readRuns } from "../status/runReads.js";
import type { Readiness, ResumeResult, RunNowResult, TaskStatus } from "../status/statusModel.js";
import { buildTaskStatuses } from "../status/taskStatuses.js";
import { ConfigApplier } from "./configApplier.js";
import { FleetOperations } from "./operations.js";
import { OperatorActions, type RunNowOptions } from "./operatorActions.js";
import { RunHistoryRetention } from "./retention.js";
import { RunReporter } from "./runReporter.js";
import { schedulerEngine } from "./schedulerEngine.js";
import {
  checkPoolSize,
  parseSchedulerSettings,
  type SchedulerSettings,
  type SchedulerSettingsInput,
} from "./settings.js";
import type { TaskRegistration } from "./taskDefinition.js";
import { TaskDefinitions } from "./taskDefinitions.js";
import { type RegisteredTask, TaskRegistry } from "./taskRegistry.js";

export interface SchedulerOptions extends SchedulerSettingsInput {
  /**
   * The PostgreSQL pool the scheduler uses, of at least 3 connections (MIN_POOL_MAX in
   * src/scheduler/settings.ts). It is not closed by stop(): end it after.
   */
  pool: Pool;
  /** Where the desired state comes from. */
  config: ConfigSource;
  logger?: Logger;
  /**
   * The time the scheduler and its engine read and the timers that wake them (src/core/clock.ts);
   * the system clock unless a test drives it.
   */
  clock?: Clock;
}

export interface StopResult {
  /** Runs that finished while draining. */
  completed: number;
  /**
   * Tasks whose run was cut off at the drain deadline: their signal fired, they are recorded
   * `interrupted` (not failed), and their slot is handed to the other instances, which re-run it.
   */
  handedOff: string[];
  /** Tasks whose handler ignored its signal past the hand-off wait: their lock expires and is taken over. */
  abandoned: string[];
}

export { IN_PROCESS_CALLER, type RunNowOptions } from "./operatorActions.js";

type State = "new" | "starting" | "running" | "stopping" | "stopped";

/**
 * The public face of the framework. Start-up follows docs/design.md ("Start-up and shutdown"): every task is registered before
 * start(); start() defines the handlers in Agenda, reads the full desired state, reconciles it,
 * starts the workers and then watches the config for changes.
 */
export class Scheduler extends EventEmitter<SchedulerEvents> {
  readonly settings: SchedulerSettings & { instanceId: string };
  readonly #registry = new TaskRegistry();
  readonly #logger: Logger;
  readonly #engine: AgendaEngine;
  readonly #reporter: RunReporter;
  /** Each task's engine options, limits in force and isolated hosts (src/scheduler/taskDefinitions.ts). */
  readonly #definitions: TaskDefinitions;
  /** The fleet's switches and views on a bad day: pause all, the instances, the run search (docs/operations.md). */
  readonly fleet: FleetOperations;
  readonly #clock: Clock;
  readonly #config: ConfigApplier;
  readonly #audit: AuditLog;
  readonly #actions: OperatorActions;
  readonly slotActions: OperatorActions["slots"]; // re-run a slot, backfill (docs/operations.md)
  #state: State = "new";
  readonly #pool: Pool;
  #starting: Promise<void> | undefined;
  #stopping: Promise<StopResult> | undefined;
  readonly #retention: RunHistoryRetention;
  /** Listeners that failed, each logged once per event (src/core/safeEmit.ts). */
  readonly #listenerFailures: ListenerFailures;

  constructor(options: SchedulerOptions) {
    super();
    const { pool, config, logger, clock = systemClock, ...settingsInput } = options;
    this.#clock = clock;
    const settings = parseSchedulerSettings(settingsInput);
    checkPoolSize(pool.options.max);
    this.#pool = pool;
    const instanceId =
      settings.instanceId ?? `${hostname()}:${process.pid}:${Math.random().toString(36).slice(2, 6)}`;
    this.settings = { ...settings, instanceId };
    this.#logger = redactingChild(logger ?? createLogger(), { instanceId });
    this.#listenerFailures = new ListenerFailures(this.#logger, "listener");
    // the database password never leaves in clear, even quoted in a task's own error message
    registerSecret(typeof pool.options.password === "string" ? pool.options.password : undefined);
    registerUrlPassword(pool.options.connectionString);
    const registry = this.#registry;
    this.#definitions = new TaskDefinitions({
      registry,
      logger: this.#logger,
      pool,
      instanceId,
      clock,
      settings,
      emitter: this,
    });
    const reporter = new RunReporter(this, this.#logger, instanceId, this.#definitions.modules, (name) =>
      this.#definitions.limitsOf(name),
    );
    this.#reporter = reporter;
    this.#engine = schedulerEngine({
      pool,
      settings: this.settings,
      clock,
      logger: this.#logger,
      reporter,
      emitter: this,
      repair: () => this.#config.repair(),
    });
    this.#audit = new AuditLog(pool, settings.namespace);
    this.#retention = new RunHistoryRetention({
      engine: this.#engine,
      settings,
      logger: this.#logger,
      clock,
      running: () => this.#state === "running",
    });
    // the operator's actions, audited with the config revision in force
    const revision = () => this.#config.current?.revision ?? "-";
    const actions = { engine: this.#engine, audit: this.#audit, instanceId, clock, revision };
    this.#actions = new OperatorActions({ ...actions, pool, registry, logger: this.#logger });
    this.fleet = new FleetOperations(actions);
    this.slotActions = this.#actions.slots;
    this.#config = new ConfigApplier({
      source: config,
      engine: this.#engine,
      registry,
      audit: this.#audit,
      store: new DesiredStateStore(pool, settings.namespace),
      settings: this.settings,
      logger: this.#logger,
      clock,
      emitter: this,
      running: () => this.#state === "running",
      onReconciled: (state, trigger) => this.#definitions.applyLimits(state, trigger, this),
    });
  }

  /**
   * Calls every listener through safeEmit (src/core/safeEmit.ts): a listener that throws, or an
   * async one that rejects (a metrics or alert hook, a test), never fails a run, a lock or a
   * reconcile, nor keeps the other listeners from being called. Each listener's first failure on
   * an event is logged at error level with the event's name; its later ones at debug level.
   */
  override emit<K extends keyof SchedulerEvents>(
    event: K,
    ...args: K extends keyof SchedulerEvents ? SchedulerEvents[K] : never
  ): boolean {
    const listeners = this.rawListeners(event) as Array<(...values: never[]) => unknown>;
    return safeEmit(listeners, event, this, args, this.#listenerFailures);
  }

  get instanceId(): string {
    return this.settings.instanceId;
  }

  /** Registers a task handler. Names are unique; every task must be registered before start(). */
  register(task: TaskRegistration): void {
    this.#registry.register(task);
  }

  /** The registered tasks, by name. */
  tasks(): RegisteredTask[] {
    return this.#registry.list();
  }

  /**
   * Starts the scheduler (docs/design.md, "Start-up and shutdown"). A start that fails, or that a
   * stop() cuts short, leaves nothing running: it stops what it had started and then rejects,
   * with the start's own error, or with CronwardenError SCHEDULER_STOPPED when stop() was called
   * meanwhile (docs/operations.md, "Stopping").
   */
  async start(): Promise<void> {
    if (this.#state !== "new")
      throw new CronwardenError("SCHEDULER_STATE", `start() called on a scheduler that is ${this.#state}`);
    this.#state = "starting";
    this.#starting = this.#start();
    try {
      await this.#starting;
    } catch (error) {
      // the same stop as any caller's (or theirs, when stop() cut the start short): when it has
      // settled, no timer, watcher, worker, poller or liveness session of this scheduler is left
      await this.stop().catch(() => {});
      throw error;
    }
  }

  /** Throws SCHEDULER_STOPPED once stop() was called: each step of #start() checks before the next one starts. */
  #stillStarting(step: string): void {
    if (this.#state === "starting") return;
    throw new CronwardenError(
      "SCHEDULER_STOPPED",
      `start() did not complete: stop() was called while the scheduler was starting (${step}); it stopped what had started and the scheduler is stopped`,
    );
  }

  async #start(): Promise<void> {
    this.#registry.seal();
    await this.#engine.prepare();
    this.#stillStarting("after preparing the schema");
    // one handler for every task, found by name: no closure per task (10,000 tasks hold them all)
    const runRegistered: RunHandler = (run) => {
      const task = this.#registry.get(run.taskName);
      if (!task) return Promise.reject(new Error(`task "${run.taskName}" is not registered`));
      return this.#definitions.run(task, run, this.#reporter);
    };
    this.#definitions.define(this.#engine, runRegistered, this.#reporter);
    await this.#config.applyFirst((step) => this.#stillStarting(step));
    this.#stillStarting("after the first reconcile");
    // the run log's partitions for the runs about to start (src/engine/sql/runLogPartitions.ts)
    await this.#retention.ensurePartitions(new Date(this.#clock.now()));
    await this.#engine.start();
    await this.#definitions.sharded?.start(); // the shard worker (docs/sharding.md)
    this.#stillStarting("after starting the workers");
    this.#config.start();
    this.#retention.start();
    this.#state = "running";
    this.#logger.info(
      {
        tasks: this.#registry.list().map((task) => task.name),
        config: this.#config.current?.revision ?? null,
      },
      `scheduler started with ${this.#registry.list().length} registered task(s)`,
    );
  }

  /**
   * Stops taking new runs and waits for running ones (up to drainTimeoutMs), and for a retention
   * prune in flight. Every call returns the same promise: a second stop(), the shutdown path's,
   * awaits the same drain and gets the same outcome (or the same error); the first call's
   * drainTimeoutMs is the one that applies. A stop during start()
   * cuts the start short at its next step, then stops what it had started.
   */
  stop(options: { drainTimeoutMs?: number } = {}): Promise<StopResult> {
    if (this.#state === "new") {
      this.#state = "stopped";
      this.#stopping = Promise.resolve({ completed: 0, handedOff: [], abandoned: [] });
    }
    this.#stopping ??= this.#stop(options);
    return this.#stopping;
  }

  async #stop(options: { drainTimeoutMs?: number }): Promise<StopResult> {
    this.#state = "stopping";
    // no new anti-entropy or prune pass, even while a start settles
    this.#config.stopPasses();
    this.#retention.stop();
    await this.#starting?.catch(() => {}); // a failed start is the caller's to report
    const drainTimeoutMs = options.drainTimeoutMs ?? this.settings.drainTimeoutMs;
    this.#logger.info({ drainTimeoutMs }, "stopping: no new runs; waiting for running ones");
    await this.#config.stop();
    // one deadline for shards and runs; registered live until the shards ended (docs/sharding.md, "Shutdown")
    const shards = this.#definitions.sharded?.drain(drainTimeoutMs);
    const drained = this.#engine.drain(drainTimeoutMs, { keepRegisteredUntil: shards });
    // the prunes in flight end while the workers drain: a prune never delays the end of new runs
    const [outcome] = await Promise.all([drained, this.#retention.settled(), shards]);
    this.#definitions.close();
    if (outcome.handedOff.length > 0) {
      this.#logger.warn(
        { handedOff: outcome.handedOff, drainTimeoutMs },
        `${outcome.handedOff.length} run(s) still going after ${drainTimeoutMs} ms were cut off and handed to the other instances, which re-run their slots; recorded as interrupted`,
      );
    }
    if (outcome.abandoned.length > 0) {
      this.#logger.error(
        { abandoned: outcome.abandoned, drainTimeoutMs },
        `stopped with ${outcome.abandoned.length} run(s) whose handler ignored its abort signal; their lock expires and their slot is taken over`,
      );
    } else if (outcome.handedOff.length > 0) {
      this.#logger.info(
        { completed: outcome.completed, handedOff: outcome.handedOff },
        `stopped: ${outcome.completed} run(s) finished, ${outcome.handedOff.length} handed off`,
      );
    } else {
      this.#logger.info({ completed: outcome.completed }, "stopped: every run finished");
    }
    this.#state = "stopped";
    return outcome;
  }

  /** The desired state in force (last valid snapshot), if any. */
  desiredState(): DesiredState | undefined {
    return this.#config.current;
  }

  lastReconcile(): ReconcileResult | undefined {
    return this.#config.lastResult;
  }

  /** The job rows of the tasks (runtime state). */
  jobs(): Promise<TaskJob[]> {
    return this.#engine.listJobs();
  }

  /**
   * Finished runs of a task, the latest written first (src/status/runReads.ts). For the history
   * as an operator reads it, newest slot first, see runHistory().
   */
  runs(taskName: string, limit?: number): Promise<RunRecord[]> {
    return readRuns(this.#pool, taskName, limit);
  }

  /**
   * A page of a task's run history, newest slot first (a slot's attempts latest first), filtered by
   * outcome, trigger and end time; what GET /tasks/:name/runs answers.
   */
  runHistory(query: HistoryQuery): Promise<HistoryPage> {
    return readHistory(this.#pool, query);
  }

  /** A sharded slot's shards (docs/sharding.md), its latest round unless `round` is given. */
  shards(taskName: string, scheduledAt: Date, round?: number) {
    return this.#definitions.sharded?.shards(taskName, scheduledAt, round) ?? Promise.resolve(undefined);
  }
  /** The shard progress of the sharded slots in [from, to) (the dashboard's timeline, docs/sharding.md). */
  shardProgress(query: { from: Date; to: Date; tasks?: readonly string[] | undefined }) {
    return this.#definitions.sharded?.progress(query) ?? Promise.resolve([]);
  }

  /** One run record by id, with its error stack and the handler's log lines. */
  runDetail(id: string): Promise<RunDetail | undefined> {
    return readRunDetail(this.#pool, id);
  }

  /** Every slot of many tasks over a range (runs, missed slots, the run in progress), paged. */
  timeline(query: TimelineQuery): Promise<TimelinePage> {
    return readTimeline(
      {
        pool: this.#pool,
        namespace: this.settings.namespace,
        missedSlotGraceMs: this.settings.missedSlotGraceMs,
      },
      query,
    );
  }

  /** The audit trail of applied changes, newest first. */
  auditTrail(query: { task?: string; limit?: number } = {}): Promise<AuditRecord[]> {
    return this.#audit.list(query);
  }

  /** Every task, registered or only present as a job row, with desired and runtime state side by side. */
  async status(): Promise<TaskStatus[]> {
    const [jobs, summaries] = await Promise.all([this.#engine.listJobs(), readRunSummaries(this.#pool)]);
    return buildTaskStatuses({
      registered: this.#registry.list(),
      desired: this.#config.current,
      jobs,
      summaries,
    });
  }

  async taskStatus(name: string): Promise<TaskStatus | undefined> {
    return (await this.status()).find((task) => task.name === name);
  }

  /**
   * Runs a task now, once, on whichever instance picks it up first, as one-at-a-time as scheduled
   * runs: refused while a run is in progress or the task is disabled. `requestedBy` (the admin
   * API's token name) goes into the run record and the audit trail (kind `run-now`).
   */
  runNow(name: string, options: RunNowOptions = {}): Promise<RunNowResult> {
    return this.#actions.runNow(name, options);
  }

  /**
   * Resumes a task paused by failure (docs/behaviour.md, "Pause on failure"): enabled, its streak
   * cleared, its next run per catchUp. Audited (kind `resume`, who asked) in the same transaction;
   * refused for an unknown task or one not paused.
   */
  resume(name: string, options: RunNowOptions = {}): Promise<ResumeResult> {
    return this.#actions.resume(name, options);
  }

  /**
   * Ready when the database answers, a desired state is in force and the workers run. A pause-all
   * in force is shown (`pausedAll`, since when) but leaves the instance ready: it is an operator's
   * choice. Its author and reason are not here: /readyz answers without a token (GET /pause-all).
   */
  async readiness(): Promise<Readiness> {
    const database = this.#state === "running" && this.#engine.databaseUp;
    const desiredStateLoaded = this.#config.current !== undefined;
    const workersStarted = this.#engine.started;
    return {
      ready: database && desiredStateLoaded && workersStarted,
      database,
      desiredStateLoaded,
      workersStarted,
      pausedAll: this.#engine.pauseState ? { pausedAt: this.#engine.pauseState.pausedAt } : null,
    };
  }

  /** Per slot, the state of each downstream's wait for its upstreams, newest first (docs/dependencies.md). */
  chains(query: { tasks?: string[]; limit?: number } = {}): Promise<ChainSlot[]> {
    return this.#engine.chains({ ...query, limit: Math.min(Math.max(query.limit ?? 50, 1), 500) });
  }

  /** Runs the dependency sweeper now (waitAtMost, queued downstream runs); it also runs every second. */
  sweepDependencies(): Promise<void> {
    return this.#engine.sweepDependencies();
  }

  /** Runs the missed-slot check now, instead of waiting for its next period. */
  checkMissedSlots() {
    return this.#engine.checkMissedSlots();
  }

  /**
   * Deletes run history past the retention (by age, and by count per task); returns the rows deleted (null: another
   * instance is at it). stop() waits for every prune in flight, the hourly one and called ones.
   */
  pruneRunHistory(now = clockDate(this.#clock)): Promise<number | null> {
    return this.#retention.prune(now);
  }
}

export function createScheduler(options: SchedulerOptions): Scheduler {
  return new Scheduler(options);
}

import { EventEmitter } from "node:events";
import { hostname } from "node:os";
import type { Pool } from "pg";
import { ConfigWatcher } from "../config/configWatcher.js";
import { parseDesiredState } from "../config/desiredState.js";
import { checkFleetGuard } from "../config/fleetGuard.js";
import { type Clock, systemClock } from "../core/clock.js";
import { AgendaEngine, type ChainSlot, type RunRecord, type TaskJob } from "../engine/agendaEngine.js";
import type { RunHandler } from "../engine/engineApi.js";
import {
  ConfigReconciler,
  describePause,
  type ReconcileResult,
  type ReconcileTrigger,
} from "../reconcile/configReconciler.js";
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
import { PeriodicTimer, POLL_PHASES } from "../core/periodic.js";
import { ListenerFailures, safeEmit } from "../core/safeEmit.js";
import { registerSecret, registerUrlPassword } from "../observability/redact.js";
import type { Readiness, ResumeResult, RunNowResult, TaskStatus } from "../status/statusModel.js";
import { buildTaskStatuses } from "../status/taskStatuses.js";
import { RunReporter } from "./runReporter.js";
import {
  checkPoolSize,
  parseSchedulerSettings,
  type SchedulerSettings,
  type SchedulerSettingsInput,
} from "./settings.js";
import type { TaskRegistration } from "./taskDefinition.js";
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
   * The time the scheduler and its engine read (src/core/clock.ts); the system clock unless a test
   * drives it. Timers still wait in real time.
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

export interface RunNowOptions {
  /** Who asked: a user or token name, never a secret. Default "in-process". */
  requestedBy?: string;
  /** Through what: the audit row's source. Default "scheduler.runNow()". */
  via?: string;
  /**
   * Its downstreams follow this manual run's slot (docs/dependencies.md, "Run now"); default false:
   * a manual run of an upstream starts no downstream.
   */
  withDownstream?: boolean;
}

/** Who a runNow() without `requestedBy` is recorded as: the process's own code. */
export const IN_PROCESS_CALLER = "in-process";

/** How often run history past its retention is pruned. */
const RETENTION_EVERY_MS = 3_600_000;

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
  readonly #reconciler: ConfigReconciler;
  readonly #clock: Clock;
  readonly #watcher: ConfigWatcher;
  readonly #store: DesiredStateStore;
  readonly #audit: AuditLog;
  #antiEntropyTimer: PeriodicTimer | undefined;
  #retentionTimer: NodeJS.Timeout | undefined;
  #antiEntropyPass: Promise<void> | undefined;
  #state: State = "new";
  /** Registered tasks whose job is enabled, as of the last reconcile: the fleet guard's baseline. */
  #enabledTasks = new Set<string>();
  readonly #pool: Pool;
  #starting: Promise<void> | undefined;
  #stopping: Promise<StopResult> | undefined;
  /** The hourly retention prune in flight, if any (one at a time). */
  #hourlyPrune: Promise<void> | undefined;
  /** Every prune in flight, settled either way: stop() waits for them. */
  readonly #prunes = new Set<Promise<void>>();
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
    const reporter = new RunReporter(this, this.#logger, instanceId);
    this.#reporter = reporter;
    this.#engine = new AgendaEngine({
      pool,
      instanceId,
      processEveryMs: settings.processEveryMs,
      lockLifetimeMs: settings.lockLifetimeMs,
      maxConcurrency: settings.maxConcurrency,
      timeoutGraceMs: settings.timeoutGraceMs,
      healthProbeMs: settings.healthProbeMs,
      missedSlotGraceMs: settings.missedSlotGraceMs,
      missedSlotCheckMs: settings.missedSlotCheckMs,
      livenessCheckMs: settings.livenessCheckMs,
      migrate: settings.migrate,
      logger: this.#logger,
      clock,
      repairLostNextRun: async () => {
        const current = this.#watcher.current;
        if (current) await this.#reconcile(current, "anti-entropy");
      },
      hooks: {
        ...reporter.hooks(),
        missedSlot: (missed) => this.emit("missed-slot", { ...missed, detectedAt: new Date(clock()) }),
        slotsSkipped: (skipped) => this.emit("slots:skipped", skipped),
        taskPaused: (paused) => this.emit("task:paused", paused),
      },
    });
    this.#store = new DesiredStateStore(pool, settings.namespace);
    this.#audit = new AuditLog(pool, settings.namespace);
    this.#reconciler = new ConfigReconciler({
      target: this.#engine,
      registry: this.#registry,
      logger: this.#logger,
      now: () => new Date(clock()),
      recorder: {
        recordAudit: (entries) => this.#audit.record(entries),
        saveApplied: (state, appliedBy) =>
          this.#store.save({
            document: state.document,
            source: state.source,
            revision: state.revision,
            appliedBy,
          }),
      },
    });
    this.#watcher = new ConfigWatcher({
      source: config,
      defaultTimezone: settings.defaultTimezone,
      rules: { minIntervalMs: settings.minIntervalMs },
      logger: this.#logger,
      guard: (state) =>
        checkFleetGuard(state, {
          enabledNow: this.#enabledTasks,
          registered: this.#registry.names(),
          maxDisableShare: settings.maxDisableShare,
        }),
      onSnapshot: (state) => this.#reconcile(state, "config"),
      onLoaded: (state) =>
        this.emit("config:loaded", {
          revision: state.revision,
          valid: state.tasks.length,
          rejected: state.rejected.length,
        }),
      onError: (error) => this.emit("config:error", { source: config.description, error }),
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
      return this.#reporter.run(task, run);
    };
    // a registered task carries its timeoutMs and retry: it is the definition's options as it is
    for (const task of this.#registry.list()) this.#engine.defineTask(task.name, runRegistered, task);
    this.#enabledTasks = new Set(
      (await this.#engine.listJobs()).filter((job) => !job.disabled).map((job) => job.name),
    );
    this.#stillStarting("before reading the config");
    const fromSource = await this.#watcher.loadInitial();
    this.#stillStarting("after reading the config");
    if (fromSource) {
      await this.#reconcile(fromSource, "config");
    } else {
      const stored = await this.#loadStored();
      this.#stillStarting("after reading the last applied config");
      if (stored) await this.#reconcile(stored, "stored");
    }
    this.#stillStarting("after the first reconcile");
    await this.#engine.start();
    this.#stillStarting("after starting the workers");
    this.#watcher.start();
    this.#startAntiEntropy();
    this.#startRetention();
    this.#state = "running";
    this.#logger.info(
      {
        tasks: this.#registry.list().map((task) => task.name),
        config: this.#watcher.current?.revision ?? null,
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
    this.#antiEntropyTimer?.stop();
    clearInterval(this.#retentionTimer);
    await this.#starting?.catch(() => {}); // a failed start is the caller's to report
    const drainTimeoutMs = options.drainTimeoutMs ?? this.settings.drainTimeoutMs;
    this.#logger.info({ drainTimeoutMs }, "stopping: no new runs; waiting for running ones");
    await this.#antiEntropyPass;
    await this.#watcher.stop();
    // the prunes in flight end while the workers drain: a prune never delays the end of new runs
    const [outcome] = await Promise.all([this.#engine.drain(drainTimeoutMs), this.#prunesSettled()]);
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
    return this.#watcher.current;
  }

  lastReconcile(): ReconcileResult | undefined {
    return this.#reconciler.lastResult;
  }

  /** The job rows of the tasks (runtime state). */
  jobs(): Promise<TaskJob[]> {
    return this.#engine.listJobs();
  }

  /**
   * Finished runs of a task, the latest written first (the engine's read of its run log). For the
   * history as an operator reads it, newest slot first, see runHistory().
   */
  runs(taskName: string, limit?: number): Promise<RunRecord[]> {
    return this.#engine.listRuns(taskName, limit);
  }

  /**
   * A page of a task's run history, newest slot first (a slot's attempts latest first), filtered by
   * outcome, trigger and end time; what GET /tasks/:name/runs answers.
   */
  runHistory(query: HistoryQuery): Promise<HistoryPage> {
    return readHistory(this.#pool, query);
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
    const [jobs, summaries] = await Promise.all([this.#engine.listJobs(), this.#engine.runSummaries()]);
    return buildTaskStatuses({
      registered: this.#registry.list(),
      desired: this.#watcher.current,
      jobs,
      summaries,
    });
  }

  async taskStatus(name: string): Promise<TaskStatus | undefined> {
    return (await this.status()).find((task) => task.name === name);
  }

  /**
   * Runs a task now, once, on whichever instance picks it up first, with the same one-at-a-time
   * guarantee as scheduled runs: refused while a run is in progress or the task is disabled.
   * `requestedBy` names who asked (the admin API passes its token's name); it goes into the run
   * record and, with the request, into the audit trail (kind `run-now`).
   */
  async runNow(name: string, options: RunNowOptions = {}): Promise<RunNowResult> {
    if (!this.#registry.has(name)) {
      return { status: "unknown", taskName: name, reason: `no task "${name}" is registered in this service` };
    }
    const requestedBy = options.requestedBy ?? IN_PROCESS_CALLER;
    const via = options.via ?? "scheduler.runNow()";
    const requestedAt = new Date(this.#clock());
    const outcome = await this.#engine.requestRun(
      name,
      requestedBy,
      (db) =>
        this.#audit.record(
          [
            {
              task: name,
              kind: "run-now",
              field: "run",
              oldValue: null,
              newValue: `${requestedAt.toISOString()}${options.withDownstream ? " with downstream" : ""}`,
              source: via,
              revision: this.#watcher.current?.revision ?? "-",
              instance: this.instanceId,
              actor: requestedBy,
            },
          ],
          db,
        ),
      { withDownstream: options.withDownstream === true },
    );
    switch (outcome) {
      case "queued":
        this.#logger.info({ task: name, requestedBy, via }, `run requested for "${name}" by ${requestedBy}`);
        return { status: "queued", taskName: name, requestedAt, requestedBy };
      case "running":
        return {
          status: "running",
          taskName: name,
          reason: `"${name}" is running now; try again when it has finished`,
        };
      case "disabled": {
        const paused = (await this.#engine.listJobs()).find((job) => job.name === name)?.pausedByFailure;
        return {
          status: "disabled",
          taskName: name,
          reason: paused
            ? `"${name}" is paused by failure (after ${paused.failures} failed slot(s)); resume it first (POST /tasks/${name}/resume, cronwarden resume ${name})`
            : `"${name}" is disabled; enable it in the config to run it`,
        };
      }
      case "missing":
        return {
          status: "unknown",
          taskName: name,
          reason: `"${name}" has no job yet: it is not in the config`,
        };
    }
  }

  /**
   * Resumes a task paused by failure (docs/behaviour.md, "Pause on failure"): enabled again, its
   * failure streak cleared; its next run follows catchUp, as after an enable. Audited (kind
   * `resume`, with who asked) in the same transaction. Refused for an unknown task or one that is
   * not paused.
   */
  async resume(name: string, options: RunNowOptions = {}): Promise<ResumeResult> {
    if (!this.#registry.has(name)) {
      return { status: "unknown", taskName: name, reason: `no task "${name}" is registered in this service` };
    }
    const requestedBy = options.requestedBy ?? IN_PROCESS_CALLER;
    const via = options.via ?? "scheduler.resume()";
    const outcome = await this.#engine.resume(name, true, (db, pause) =>
      this.#audit.record(
        [
          {
            task: name,
            kind: "resume",
            field: "pausedByFailure",
            oldValue: describePause(pause),
            newValue: "resumed",
            source: via,
            revision: this.#watcher.current?.revision ?? "-",
            instance: this.instanceId,
            actor: requestedBy,
          },
        ],
        db,
      ),
    );
    switch (outcome.status) {
      case "resumed":
        this.#logger.info(
          { task: name, requestedBy, via, pause: outcome.pause },
          `task "${name}" resumed by ${requestedBy} (it was paused after ${outcome.pause.failures} failed slot(s))`,
        );
        return {
          status: "resumed",
          taskName: name,
          resumedBy: requestedBy,
          pause: outcome.pause,
          nextRunAt: outcome.nextRunAt,
        };
      case "not-paused":
        return {
          status: "not-paused",
          taskName: name,
          reason: `"${name}" is not paused by failure; nothing to resume (enable a disabled task in the config)`,
        };
      case "missing":
        return {
          status: "unknown",
          taskName: name,
          reason: `"${name}" has no job yet: it is not in the config`,
        };
    }
  }

  /** Ready when the database answers, a desired state is in force and the workers run. */
  async readiness(): Promise<Readiness> {
    const database = this.#state === "running" && this.#engine.databaseUp;
    const desiredStateLoaded = this.#watcher.current !== undefined;
    const workersStarted = this.#engine.started;
    return {
      ready: database && desiredStateLoaded && workersStarted,
      database,
      desiredStateLoaded,
      workersStarted,
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

  async #reconcile(state: DesiredState, trigger: ReconcileTrigger): Promise<void> {
    let result: ReconcileResult;
    try {
      result = await this.#reconciler.reconcile(state, trigger);
    } catch (error) {
      this.emit("reconcile:failed", { error: error as Error, trigger });
      throw error;
    }
    this.#enabledTasks = result.enabledTasks;
    if (trigger !== "anti-entropy") {
      for (const action of result.plan.actions) {
        if (action.kind === "reject") {
          this.emit("config:rejected", {
            taskName: action.task,
            reason: action.reason,
            revision: state.revision,
          });
        }
      }
    }
    this.emit("reconciled", result);
  }

  /** The durable last-known desired state, when the config source cannot be read at start-up. */
  async #loadStored(): Promise<DesiredState | undefined> {
    const stored = await this.#store.load();
    if (!stored) {
      this.#logger.error(
        { namespace: this.settings.namespace },
        "no config could be read and none was ever applied: the jobs in the database keep their current state",
      );
      return undefined;
    }
    const state = parseDesiredState(stored.document, {
      defaultTimezone: this.settings.defaultTimezone,
      rules: { minIntervalMs: this.settings.minIntervalMs },
      now: new Date(this.#clock()),
      source: `last applied config (${stored.source})`,
      revision: stored.revision,
    });
    this.#watcher.adopt(state);
    this.#logger.warn(
      {
        revision: stored.revision,
        appliedAt: stored.appliedAt,
        appliedBy: stored.appliedBy,
        source: stored.source,
      },
      `config source unreachable at start-up: scheduling from the last applied config, revision ${stored.revision} of ${stored.source}, applied ${stored.appliedAt.toISOString()} by ${stored.appliedBy}`,
    );
    return state;
  }

  /**
   * Deletes run history past the retention (by age, and by count per task); returns the rows deleted (null: another
   * instance is at it). stop() waits for every prune in flight, the hourly one and called ones.
   */
  pruneRunHistory(now = new Date(this.#clock())): Promise<number | null> {
    const prune = this.#prune(now);
    const settled = prune.then(
      () => undefined,
      () => undefined,
    );
    this.#prunes.add(settled);
    void settled.finally(() => this.#prunes.delete(settled));
    return prune;
  }

  async #prune(now: Date): Promise<number | null> {
    const days = this.settings.runLogRetentionDays;
    const keepPerTask = this.settings.runLogKeepPerTask;
    if (days <= 0 && keepPerTask <= 0) return 0;
    const deleted = await this.#engine.pruneRunLog({
      before: days > 0 ? new Date(now.getTime() - days * 86_400_000) : null,
      keepPerTask,
    });
    if (deleted)
      this.#logger.info(
        { deleted, retentionDays: days, keepPerTask },
        `pruned ${deleted} run-log row(s) past the retention (${days > 0 ? `older than ${days} days` : "any age"}, ${keepPerTask > 0 ? `the last ${keepPerTask} records of each task kept` : "any number"})`,
      );
    return deleted;
  }

  async #prunesSettled(): Promise<void> {
    while (this.#prunes.size > 0) await Promise.all(this.#prunes);
  }

  #startRetention(): void {
    if (this.settings.runLogRetentionDays <= 0 && this.settings.runLogKeepPerTask <= 0) return;
    this.#retentionTimer = setInterval(() => {
      if (this.#hourlyPrune || this.#state !== "running") return;
      this.#hourlyPrune = this.pruneRunHistory()
        .then(() => undefined)
        .catch((error: unknown) =>
          this.#logger.warn({ err: error }, "pruning the run history failed; retrying in an hour"),
        )
        .finally(() => {
          this.#hourlyPrune = undefined;
        });
    }, RETENTION_EVERY_MS);
    this.#retentionTimer.unref();
  }

  /** Besides change events, a full reconcile now and then repairs drift (rows edited or deleted by hand). */
  #startAntiEntropy(): void {
    const every = this.settings.antiEntropyMs;
    if (every <= 0) return;
    const phaseMs = POLL_PHASES.antiEntropy * this.settings.processEveryMs;
    this.#antiEntropyTimer = new PeriodicTimer(every, phaseMs, () => {
      const current = this.#watcher.current;
      if (!current || this.#antiEntropyPass || this.#state !== "running") return;
      this.#antiEntropyPass = this.#reconcile(current, "anti-entropy")
        .catch((error: unknown) =>
          this.#logger.error({ err: error }, "anti-entropy pass failed; retrying at the next one"),
        )
        .finally(() => {
          this.#antiEntropyPass = undefined;
        });
    });
    this.#antiEntropyTimer.start();
  }
}

export function createScheduler(options: SchedulerOptions): Scheduler {
  return new Scheduler(options);
}

import type { EventEmitter } from "node:events";
import { ConfigWatcher } from "../config/configWatcher.js";
import { type DesiredState, parseDesiredState } from "../config/desiredState.js";
import { checkFleetGuard } from "../config/fleetGuard.js";
import { type Clock, clockDate } from "../core/clock.js";
import type { Logger } from "../core/logger.js";
import { PeriodicTimer, POLL_PHASES } from "../core/periodic.js";
import type { AgendaEngine } from "../engine/agendaEngine.js";
import {
  ConfigReconciler,
  type ReconcileResult,
  type ReconcileTrigger,
} from "../reconcile/configReconciler.js";
import type { ConfigSource } from "../sources/configSource.js";
import type { AuditLog } from "../store/auditLog.js";
import type { DesiredStateStore } from "../store/desiredStateStore.js";
import type { SchedulerEvents } from "./events.js";
import type { SchedulerSettings } from "./settings.js";
import type { TaskRegistry } from "./taskRegistry.js";

export interface ConfigApplierDeps {
  source: ConfigSource;
  engine: AgendaEngine;
  registry: TaskRegistry;
  audit: Pick<AuditLog, "record">;
  store: DesiredStateStore;
  settings: SchedulerSettings & { instanceId: string };
  logger: Logger;
  clock: Clock;
  /** Where `config:*`, `reconcile:failed` and `reconciled` go (the scheduler). */
  emitter: Pick<EventEmitter<SchedulerEvents>, "emit">;
  /** Anti-entropy passes run only while the scheduler runs. */
  running: () => boolean;
  /** After each reconcile: the task limits the snapshot lowers (src/scheduler/taskDefinitions.ts). */
  onReconciled?: (state: DesiredState, trigger: ReconcileTrigger) => void;
}

/**
 * Keeps the desired state in force in the job rows (docs/design.md, "Data flow"): the first
 * reconcile at start-up (from the source, or the last applied state when the source cannot be
 * read), one per valid snapshot the watcher sees (past the fleet guard), and an anti-entropy pass
 * now and then that repairs drift (rows edited or deleted by hand).
 */
export class ConfigApplier {
  readonly #deps: ConfigApplierDeps;
  readonly #reconciler: ConfigReconciler;
  readonly #watcher: ConfigWatcher;
  /** Registered tasks whose job is enabled, as of the last reconcile: the fleet guard's baseline. */
  #enabledTasks = new Set<string>();
  #antiEntropyTimer: PeriodicTimer | undefined;
  #antiEntropyPass: Promise<void> | undefined;

  constructor(deps: ConfigApplierDeps) {
    this.#deps = deps;
    const { engine, registry, logger, clock, audit, store } = deps;
    this.#reconciler = new ConfigReconciler({
      target: engine,
      registry,
      logger,
      now: () => clockDate(clock),
      recorder: {
        recordAudit: (entries) => audit.record(entries),
        saveApplied: (state, appliedBy) =>
          store.save({
            document: state.document,
            source: state.source,
            revision: state.revision,
            appliedBy,
          }),
        converged: store,
      },
    });
    this.#watcher = this.#watcherFor(deps.source, deps.settings);
  }

  /** The desired state in force (last valid snapshot), if any. */
  get current(): DesiredState | undefined {
    return this.#watcher.current;
  }

  get lastResult(): ReconcileResult | undefined {
    return this.#reconciler.lastResult;
  }

  /**
   * The first reconcile: the source's config, or the last applied one when the source cannot be
   * read. `stillStarting` throws when a stop came meanwhile, between the steps.
   */
  async applyFirst(stillStarting: (step: string) => void): Promise<void> {
    const jobs = await this.#deps.engine.listJobs();
    this.#enabledTasks = new Set(jobs.filter((job) => !job.disabled).map((job) => job.name));
    stillStarting("before reading the config");
    const fromSource = await this.#watcher.loadInitial();
    stillStarting("after reading the config");
    if (fromSource) {
      await this.#reconcile(fromSource, "config");
    } else {
      const stored = await this.#loadStored();
      stillStarting("after reading the last applied config");
      if (stored) await this.#reconcile(stored, "stored");
    }
  }

  /** Watches the config and starts the anti-entropy passes. */
  start(): void {
    this.#watcher.start();
    this.#startAntiEntropy();
  }

  /** No new anti-entropy pass (a stop, even while a start settles). */
  stopPasses(): void {
    this.#antiEntropyTimer?.stop();
  }

  /** Waits for the pass in flight and stops watching. */
  async stop(): Promise<void> {
    this.stopPasses();
    await this.#antiEntropyPass;
    await this.#watcher.stop();
  }

  /** A reconcile of the state in force now (the engine found a job that lost its next run). */
  async repair(): Promise<void> {
    const current = this.#watcher.current;
    if (current) await this.#reconcile(current, "anti-entropy");
  }

  /** The config watcher: each valid snapshot, past the fleet guard, is reconciled. */
  #watcherFor(config: ConfigSource, settings: SchedulerSettings): ConfigWatcher {
    const { emitter } = this.#deps;
    return new ConfigWatcher({
      source: config,
      defaultTimezone: settings.defaultTimezone,
      rules: { minIntervalMs: settings.minIntervalMs },
      logger: this.#deps.logger,
      guard: (state) =>
        checkFleetGuard(state, {
          enabledNow: this.#enabledTasks,
          registered: this.#deps.registry.names(),
          maxDisableShare: settings.maxDisableShare,
        }),
      onSnapshot: (state) => this.#reconcile(state, "config"),
      onLoaded: (state) =>
        emitter.emit("config:loaded", {
          revision: state.revision,
          valid: state.tasks.length,
          rejected: state.rejected.length,
        }),
      onError: (error) => emitter.emit("config:error", { source: config.description, error }),
    });
  }

  async #reconcile(state: DesiredState, trigger: ReconcileTrigger): Promise<void> {
    const { emitter } = this.#deps;
    let result: ReconcileResult;
    try {
      result = await this.#reconciler.reconcile(state, trigger);
    } catch (error) {
      emitter.emit("reconcile:failed", { error: error as Error, trigger });
      throw error;
    }
    this.#enabledTasks = result.enabledTasks;
    this.#deps.onReconciled?.(state, trigger);
    if (trigger !== "anti-entropy") {
      for (const action of result.plan.actions) {
        if (action.kind === "reject") {
          emitter.emit("config:rejected", {
            taskName: action.task,
            reason: action.reason,
            revision: state.revision,
          });
        }
      }
    }
    emitter.emit("reconciled", result);
  }

  /** The durable last-known desired state, when the config source cannot be read at start-up. */
  async #loadStored(): Promise<DesiredState | undefined> {
    const { store, logger, settings, clock } = this.#deps;
    const stored = await store.load();
    if (!stored) {
      logger.error(
        { namespace: settings.namespace },
        "no config could be read and none was ever applied: the jobs in the database keep their current state",
      );
      return undefined;
    }
    const state = parseDesiredState(stored.document, {
      defaultTimezone: settings.defaultTimezone,
      rules: { minIntervalMs: settings.minIntervalMs },
      now: clockDate(clock),
      source: `last applied config (${stored.source})`,
      revision: stored.revision,
    });
    this.#watcher.adopt(state);
    logger.warn(
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

  /** Besides change events, a full reconcile now and then repairs drift (rows edited or deleted by hand). */
  #startAntiEntropy(): void {
    const { settings, logger, clock, running } = this.#deps;
    const every = settings.antiEntropyMs;
    if (every <= 0) return;
    const phaseMs = POLL_PHASES.antiEntropy * settings.processEveryMs;
    this.#antiEntropyTimer = new PeriodicTimer(
      every,
      phaseMs,
      () => {
        const current = this.#watcher.current;
        if (!current || this.#antiEntropyPass || !running()) return;
        this.#antiEntropyPass = this.#reconcile(current, "anti-entropy")
          .catch((error: unknown) =>
            logger.error({ err: error }, "anti-entropy pass failed; retrying at the next one"),
          )
          .finally(() => {
            this.#antiEntropyPass = undefined;
          });
      },
      clock,
    );
    this.#antiEntropyTimer.start();
  }
}

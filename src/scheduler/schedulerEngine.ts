import type { EventEmitter } from "node:events";
import { hostname } from "node:os";
import type { Pool } from "pg";
import { type Clock, clockDate } from "../core/clock.js";
import type { Logger } from "../core/logger.js";
import { POLL_PHASES } from "../core/periodic.js";
import { DependencyCoordinator } from "../dependencies/coordinator.js";
import { AgendaEngine } from "../engine/agendaEngine.js";
import type { EngineHooks } from "../engine/engineApi.js";
import { packageVersion } from "../version.js";
import type { SchedulerEvents } from "./events.js";
import type { RunReporter } from "./runReporter.js";
import { engineSettings, type SchedulerSettings } from "./settings.js";

/**
 * The scheduler's engine: its settings, and its hooks reporting runs, skipped slots, missed slots
 * and pauses as the scheduler's events.
 */
export function schedulerEngine(deps: {
  pool: Pool;
  settings: SchedulerSettings & { instanceId: string };
  clock: Clock;
  logger: Logger;
  reporter: RunReporter;
  emitter: Pick<EventEmitter<SchedulerEvents>, "emit">;
  /** A job found without a next run: a reconcile re-times it. */
  repair: () => Promise<void>;
}): AgendaEngine {
  const { clock, emitter, pool, logger } = deps;
  const settings = engineSettings(deps.settings);
  const hooks: EngineHooks = {
    ...deps.reporter.hooks(),
    missedSlot: (missed) => emitter.emit("missed-slot", { ...missed, detectedAt: clockDate(clock) }),
    slotsSkipped: (skipped) => emitter.emit("slots:skipped", skipped),
    taskPaused: (paused) => emitter.emit("task:paused", paused),
  };
  return new AgendaEngine({
    pool,
    ...settings,
    describe: { host: hostname(), version: packageVersion() },
    logger,
    clock,
    repairLostNextRun: deps.repair,
    hooks,
    dependencies: ({ wake }) =>
      new DependencyCoordinator({
        pool,
        instanceId: settings.instanceId,
        logger,
        hooks,
        sweepPhaseMs: POLL_PHASES.dependencySweep * settings.processEveryMs,
        clock,
        wake,
      }),
  });
}

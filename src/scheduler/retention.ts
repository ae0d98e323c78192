import type { Clock, ClockTimer } from "../core/clock.js";
import type { Logger } from "../core/logger.js";
import type { AgendaEngine } from "../engine/agendaEngine.js";
import type { SchedulerSettings } from "./settings.js";

/** How often run history past its retention is pruned, and the run log's partitions ahead created. */
const RETENTION_EVERY_MS = 3_600_000;

export interface RetentionDeps {
  engine: Pick<AgendaEngine, "pruneRunLog" | "ensureRunLogPartitions">;
  /**
   * `runLogRetentionDays`: run history older than this many days is deleted (0 keeps it all);
   * `runLogKeepPerTask`: each task's records beyond its latest this many are (0 keeps any number).
   */
  settings: Pick<SchedulerSettings, "runLogRetentionDays" | "runLogKeepPerTask">;
  logger: Logger;
  clock: Clock;
  /** The hourly prune runs only while the scheduler runs. */
  running: () => boolean;
}

/**
 * The run history's retention: an hourly prune (one at a time) and the prunes called
 * (Scheduler.pruneRunHistory). The scheduler's stop waits for every prune in flight: settled().
 * The same hour creates the run log's partitions ahead (src/engine/sql/runLogPartitions.ts), as
 * the start does, with or without a retention.
 */
export class RunHistoryRetention {
  readonly #deps: RetentionDeps;
  #timer: ClockTimer | undefined;
  /** The hourly prune in flight, if any (one at a time). */
  #hourly: Promise<void> | undefined;
  /** Every prune in flight, settled either way. */
  readonly #prunes = new Set<Promise<void>>();

  constructor(deps: RetentionDeps) {
    this.#deps = deps;
  }

  /** Deletes run history past the retention (by age, and by count per task); the rows deleted (null: another instance is at it). */
  prune(now: Date): Promise<number | null> {
    const prune = this.#prune(now);
    const settled = prune.then(
      () => undefined,
      () => undefined,
    );
    this.#prunes.add(settled);
    void settled.finally(() => this.#prunes.delete(settled));
    return prune;
  }

  /**
   * Creates the run log's partitions for now and the days ahead where missing. A failure is
   * logged, not thrown: a row whose partition is missing has it created when it is written.
   */
  async ensurePartitions(now: Date): Promise<void> {
    const { engine, logger } = this.#deps;
    try {
      const created = await engine.ensureRunLogPartitions(now);
      if (created > 0) logger.info({ created }, `created ${created} run-log partition(s) ahead`);
    } catch (error) {
      logger.warn({ err: error }, "creating the run log's partitions ahead failed; retrying in an hour");
    }
  }

  /** Starts the hourly partitions ahead and prune. */
  start(): void {
    const { clock, logger, running } = this.#deps;
    if (this.#timer) return;
    this.#timer = clock.setInterval(() => {
      if (this.#hourly || !running()) return;
      const now = new Date(clock.now());
      this.#hourly = this.ensurePartitions(now)
        .then(() => this.prune(now))
        .then(() => undefined)
        .catch((error: unknown) =>
          logger.warn({ err: error }, "pruning the run history failed; retrying in an hour"),
        )
        .finally(() => {
          this.#hourly = undefined;
        });
    }, RETENTION_EVERY_MS);
    this.#timer.unref();
  }

  /** Starts no more prunes; the ones in flight go on (settled()). */
  stop(): void {
    this.#deps.clock.clearInterval(this.#timer);
    this.#timer = undefined;
  }

  /** Resolves once every prune in flight has settled. */
  async settled(): Promise<void> {
    while (this.#prunes.size > 0) await Promise.all(this.#prunes);
  }

  async #prune(now: Date): Promise<number | null> {
    const { settings, engine, logger } = this.#deps;
    const { runLogRetentionDays: days, runLogKeepPerTask: keepPerTask } = settings;
    if (days <= 0 && keepPerTask <= 0) return 0;
    const deleted = await engine.pruneRunLog({
      before: days > 0 ? new Date(now.getTime() - days * 86_400_000) : null,
      keepPerTask,
    });
    if (deleted)
      logger.info(
        { deleted, retentionDays: days, keepPerTask },
        `pruned ${deleted} run-log row(s) past the retention (${days > 0 ? `older than ${days} days` : "any age"}, ${keepPerTask > 0 ? `the last ${keepPerTask} records of each task kept` : "any number"})`,
      );
    return deleted;
  }
}

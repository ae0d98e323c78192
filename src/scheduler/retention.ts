import type { Clock, ClockTimer } from "../core/clock.js";
import type { Logger } from "../core/logger.js";
import type { AgendaEngine } from "../engine/agendaEngine.js";

/** How often run history past its retention is pruned. */
const RETENTION_EVERY_MS = 3_600_000;

export interface RetentionDeps {
  engine: Pick<AgendaEngine, "pruneRunLog">;
  /** Run history older than this many days is deleted; 0 keeps it all. */
  retentionDays: number;
  logger: Logger;
  clock: Clock;
  /** The hourly prune runs only while the scheduler runs. */
  running: () => boolean;
}

/**
 * The run history's retention: an hourly prune (one at a time) and the prunes called
 * (Scheduler.pruneRunHistory). The scheduler's stop waits for every prune in flight: settled().
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

  /** Deletes run history older than the retention; the rows deleted (null: another instance is at it). */
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

  /** Starts the hourly prune. */
  start(): void {
    const { clock, logger, retentionDays, running } = this.#deps;
    if (retentionDays <= 0 || this.#timer) return;
    this.#timer = clock.setInterval(() => {
      if (this.#hourly || !running()) return;
      this.#hourly = this.prune(new Date(clock.now()))
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
    const { retentionDays: days, engine, logger } = this.#deps;
    if (days <= 0) return 0;
    const deleted = await engine.pruneRunLog(new Date(now.getTime() - days * 86_400_000));
    if (deleted)
      logger.info(
        { deleted, retentionDays: days },
        `pruned ${deleted} run-log row(s) older than ${days} days`,
      );
    return deleted;
  }
}

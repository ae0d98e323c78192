import type { Clock } from "../core/clock.js";
import type { Logger } from "../core/logger.js";
import type { DatabaseHealth } from "./databaseHealth.js";
import { DatabaseUnreachableBeforeStartError, STALE_START_MESSAGE, StaleStartError } from "./staleStart.js";

/** Errors that repeat on every poll while the database is down: each message is logged once per window. */
const ERROR_LOG_WINDOW_MS = 30_000;

export interface EngineErrorsDeps {
  logger: Logger;
  /** Asked before an error is logged: while the database is down the outage has its own line. */
  health: Pick<DatabaseHealth, "probe">;
  maxConcurrency: number;
  /** The windows' clock (src/core/clock.ts). */
  clock: Pick<Clock, "monotonic">;
}

/**
 * How the engine logs the errors of its loops and components (a claim pass, a run's start, Agenda,
 * the notification channel): once per window per message, at debug while the database is down or
 * after the drain, since the health probe's one outage line says it all.
 */
export class EngineErrors {
  readonly #deps: EngineErrorsDeps;
  readonly #lastLogged = new Map<string, number>();
  /** Drained: errors of components still closing (a LISTEN connection ended late) are not news. */
  drained = false;

  constructor(deps: EngineErrorsDeps) {
    this.#deps = deps;
  }

  /** A claim pass or a run's start failed (the loop goes on). */
  runError(error: Error): void {
    if (error instanceof StaleStartError) this.#staleStart(error);
    else if (error instanceof DatabaseUnreachableBeforeStartError) {
      if (this.#firstInWindow(error.name)) this.#deps.logger.warn({ err: error }, error.message);
    } else this.componentError(error);
  }

  /** An error event of Agenda or of a component (`origin`). */
  componentError(error: Error, origin = "agenda"): void {
    const message = `${origin}: ${error.message}`;
    void this.#deps.health.probe().then((up) => {
      if (!up || this.drained) {
        this.#deps.logger.debug({ err: error }, message);
        return;
      }
      if (this.#firstInWindow(message)) this.#deps.logger.error({ err: error }, message);
    });
  }

  /** A queued run lost its lock before a worker was free: the instance is behind its due runs. */
  #staleStart(error: StaleStartError): void {
    if (!this.#firstInWindow(STALE_START_MESSAGE)) return;
    this.#deps.logger.warn(
      { err: error, maxConcurrency: this.#deps.maxConcurrency },
      `a due run waited longer than its lock lifetime for a free worker and was locked again (${error.message}); more due runs than this instance starts in a lock lifetime: raise maxConcurrency or add instances`,
    );
  }

  #firstInWindow(key: string): boolean {
    const now = this.#deps.clock.monotonic();
    const last = this.#lastLogged.get(key);
    if (last !== undefined && now - last < ERROR_LOG_WINDOW_MS) return false;
    this.#lastLogged.set(key, now);
    return true;
  }
}

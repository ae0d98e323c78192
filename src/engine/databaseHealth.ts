import type { Pool } from "pg";
import type { Clock, ClockTimer } from "../core/clock.js";
import { type Logger, toError } from "../core/logger.js";

export interface DatabaseHealthOptions {
  pool: Pool;
  logger: Logger;
  /** How often the database is probed. */
  probeEveryMs: number;
  /** The probe's timer and the outage's length (src/core/clock.ts). */
  clock: Clock;
  onChange?: (up: boolean) => void;
}

/**
 * Knows whether PostgreSQL answers, from a `SELECT 1` probe, and logs only the changes: one line
 * when it becomes unreachable (with the error), one when it is back (with the outage's length),
 * rather than one per poll of every component that notices. A statement answered elsewhere (the
 * liveness check: confirmUp) stands for the periodic probe, so an idle instance does not send both.
 */
export class DatabaseHealth {
  readonly #options: DatabaseHealthOptions;
  #up = true;
  #downSince: number | undefined;
  #timer: ClockTimer | undefined;
  #probing: Promise<boolean> | undefined;
  #confirmedAt = Number.NEGATIVE_INFINITY;
  #stopped = false;

  constructor(options: DatabaseHealthOptions) {
    this.#options = options;
  }

  get up(): boolean {
    return this.#up;
  }

  start(): void {
    this.#stopped = false;
    if (this.#timer) return;
    this.#timer = this.#options.clock.setInterval(() => {
      // a recent confirmation says the same as the probe would (half a period of slack: the
      // liveness check runs on a timer of the same period, which drifts against this one)
      if (this.#options.clock.monotonic() - this.#confirmedAt >= 1.5 * this.#options.probeEveryMs)
        void this.probe();
    }, this.#options.probeEveryMs);
    this.#timer.unref();
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    this.#options.clock.clearInterval(this.#timer);
    this.#timer = undefined;
    await this.#probing;
  }

  /** The database just answered a statement of another component: it is up, no probe needed this period. */
  confirmUp(): void {
    this.#confirmedAt = this.#options.clock.monotonic();
    this.#set(true);
  }

  /** Probes now (or joins the probe in flight); also called when a component saw a database error. */
  probe(): Promise<boolean> {
    // after stop() the caller may end its pool: a late error of a component stopping (a final
    // save, a release) must not be reported as the database being unreachable
    if (this.#stopped) return Promise.resolve(this.#up);
    this.#probing ??= this.#probeOnce().finally(() => {
      this.#probing = undefined;
    });
    return this.#probing;
  }

  async #probeOnce(): Promise<boolean> {
    try {
      await this.#options.pool.query("SELECT 1");
      this.#set(true);
    } catch (error) {
      this.#set(false, toError(error));
    }
    return this.#up;
  }

  #set(up: boolean, error?: Error): void {
    if (up === this.#up) return;
    this.#up = up;
    const { logger, onChange, clock } = this.#options;
    if (up) {
      const seconds = Math.round((clock.monotonic() - (this.#downSince ?? clock.monotonic())) / 1000);
      logger.info({ outageSeconds: seconds }, `database reachable again after ${seconds} s; runs resume`);
      this.#downSince = undefined;
    } else {
      this.#downSince = clock.monotonic();
      logger.error(
        { err: error },
        `database unreachable (${error?.message}); no runs start until it is back, retrying every ${this.#options.probeEveryMs} ms`,
      );
    }
    onChange?.(up);
  }
}

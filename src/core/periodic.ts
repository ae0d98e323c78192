import { type Clock, type ClockTimer, systemClock } from "./clock.js";

/**
 * An interval timer whose ticks are shifted by `phaseMs`: the first comes `everyMs + phaseMs` after
 * start(), the next ones every `everyMs`, on `clock`'s timers (src/core/clock.ts). Unref'd: it
 * never keeps a process alive.
 *
 * Why a phase: an idle instance's periodic statements (the claim loop's poll, the missed-slot
 * check, the anti-entropy digest, the dependency look) all start within a few milliseconds, and
 * their periods are multiples of the poll's, so without a phase they would all fall due in the same
 * millisecond, each taking a pool connection of its own. A pool closes connections idle for longer
 * than its idle timeout (pg's default: 10 s), so each such moment opened connections again, and each
 * new session costs the server a transaction. Spread over the poll period (POLL_PHASES), they take
 * turns on the one connection the poll keeps open.
 */
export class PeriodicTimer {
  readonly #everyMs: number;
  readonly #phaseMs: number;
  readonly #tick: () => void;
  readonly #clock: Clock;
  #timer: ClockTimer | undefined;

  constructor(everyMs: number, phaseMs: number, tick: () => void, clock: Clock = systemClock) {
    this.#clock = clock;
    this.#everyMs = everyMs;
    this.#phaseMs = Math.max(0, phaseMs);
    this.#tick = tick;
  }

  get running(): boolean {
    return this.#timer !== undefined;
  }

  start(): void {
    if (this.#timer || this.#everyMs <= 0) return;
    if (this.#phaseMs === 0) {
      this.#timer = this.#clock.setInterval(this.#tick, this.#everyMs);
    } else {
      this.#timer = this.#clock.setTimeout(() => {
        this.#timer = this.#clock.setInterval(this.#tick, this.#everyMs);
        this.#timer.unref();
        this.#tick();
      }, this.#everyMs + this.#phaseMs);
    }
    this.#timer.unref();
  }

  stop(): void {
    // the phase's timeout or the interval: both clocks' clearInterval clear either kind
    this.#clock.clearInterval(this.#timer);
    this.#timer = undefined;
  }
}

/**
 * Where each periodic statement falls within the poll period (a fraction of processEveryMs): the
 * poll at 0 and the others between polls, apart from each other. The dependency look runs on a 1 s
 * tick; at the default 5 s poll its phase puts it 750 ms into a second, where no other one falls.
 */
export const POLL_PHASES = {
  antiEntropy: 0.25,
  missedSlotCheck: 0.5,
  dependencySweep: 0.75,
} as const;

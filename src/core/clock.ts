import { setTimeout as delay } from "node:timers/promises";

/** A timer set through a Clock: as Node's, it can be told not to keep the process alive. */
export interface ClockTimer {
  unref(): unknown;
}

/**
 * The one source of time for the scheduler and its engine: the time read for decisions and records
 * and the timers that wake them. Code under src/engine/ reads no clock of its own (no `Date.now`,
 * `new Date()`, `performance.now` or global timer): it is handed one of these (EngineOptions.clock,
 * SchedulerOptions.clock), so that a test drives time instead of waiting for it
 * (test/helpers/testClock.ts), as pg-boss's and graphile-worker's clocks do.
 */
export interface Clock {
  /** Wall time, milliseconds since the epoch: slots, lock times, records. */
  now(): number;
  /**
   * Milliseconds on a clock that never steps back (its origin is arbitrary): elapsed time and
   * bounds on waits, which a wall clock stepped back must not stretch.
   */
  monotonic(): number;
  setTimeout(callback: () => void, ms: number): ClockTimer;
  clearTimeout(timer: ClockTimer | undefined): void;
  setInterval(callback: () => void, ms: number): ClockTimer;
  clearInterval(timer: ClockTimer | undefined): void;
  /** Waits `ms`, or less if `signal` aborts; never rejects. */
  sleep(ms: number, signal?: AbortSignal): Promise<void>;
}

/** The process's own clock: `Date`, `performance` and Node's timers. */
export const systemClock: Clock = {
  now: () => Date.now(),
  monotonic: () => performance.now(),
  setTimeout: (callback, ms) => setTimeout(callback, ms),
  clearTimeout: (timer) => clearTimeout(timer as NodeJS.Timeout | undefined),
  setInterval: (callback, ms) => setInterval(callback, ms),
  clearInterval: (timer) => clearInterval(timer as NodeJS.Timeout | undefined),
  sleep: async (ms, signal) => {
    await delay(ms, undefined, signal ? { signal } : {}).catch(() => undefined);
  },
};

/** The clock's wall time as a Date. */
export function clockDate(clock: Clock): Date {
  return new Date(clock.now());
}

import { setImmediate as turn } from "node:timers/promises";
import type { Clock, ClockTimer } from "../../src/core/clock.js";

interface Pending {
  at: number;
  seq: number;
  callback: () => void;
  /** Set for an interval: it is due again this long after it fires. */
  everyMs?: number;
}

class TestTimer implements ClockTimer {
  constructor(readonly id: number) {}
  unref(): this {
    return this;
  }
}

/**
 * A driven clock (src/core/clock.ts): time stands still until the test moves it. advance(ms) fires
 * the timers that fall due on the way, in time order, each at its own time, and lets the promises
 * they resolve settle before the next one, as vitest's advanceTimersByTimeAsync does. stepWall()
 * moves the wall time alone, as an NTP step does, without firing a timer.
 */
export class TestClock implements Clock {
  #wall: number;
  #monotonic = 0;
  #seq = 0;
  readonly #timers = new Map<number, Pending>();

  constructor(start: Date | number = Date.UTC(2026, 11, 1, 10, 0, 0)) {
    this.#wall = typeof start === "number" ? start : start.getTime();
  }

  now(): number {
    return this.#wall;
  }

  monotonic(): number {
    return this.#monotonic;
  }

  /** Timers not fired or cleared yet. */
  get pending(): number {
    return this.#timers.size;
  }

  setTimeout(callback: () => void, ms: number): ClockTimer {
    return this.#add(callback, ms);
  }

  setInterval(callback: () => void, ms: number): ClockTimer {
    return this.#add(callback, ms, Math.max(1, ms));
  }

  clearTimeout(timer: ClockTimer | undefined): void {
    if (timer instanceof TestTimer) this.#timers.delete(timer.id);
  }

  clearInterval(timer: ClockTimer | undefined): void {
    this.clearTimeout(timer);
  }

  sleep(ms: number, signal?: AbortSignal): Promise<void> {
    return new Promise((resolve) => {
      if (signal?.aborted) return resolve();
      const timer = this.setTimeout(() => {
        signal?.removeEventListener("abort", onAbort);
        resolve();
      }, ms);
      const onAbort = () => {
        this.clearTimeout(timer);
        resolve();
      };
      signal?.addEventListener("abort", onAbort, { once: true });
    });
  }

  /** Moves both times by `ms`, firing each timer due on the way at its own time. */
  async advance(ms: number): Promise<void> {
    const until = this.#monotonic + ms;
    await settle();
    for (let next = this.#nextDue(until); next; next = this.#nextDue(until)) {
      this.#moveTo(next.at);
      if (next.everyMs === undefined) this.#timers.delete(next.seq);
      else next.at += next.everyMs;
      next.callback();
      await settle();
    }
    this.#moveTo(until);
    await settle();
  }

  /** Moves the wall time alone (a clock step): no timer fires, the monotonic time stays. */
  stepWall(ms: number): void {
    this.#wall += ms;
  }

  #add(callback: () => void, ms: number, everyMs?: number): TestTimer {
    const seq = ++this.#seq;
    const at = this.#monotonic + Math.max(0, Number.isFinite(ms) ? ms : 0);
    this.#timers.set(seq, { at, seq, callback, ...(everyMs === undefined ? {} : { everyMs }) });
    return new TestTimer(seq);
  }

  #nextDue(until: number): Pending | undefined {
    let first: Pending | undefined;
    for (const timer of this.#timers.values()) {
      if (timer.at > until) continue;
      if (!first || timer.at < first.at || (timer.at === first.at && timer.seq < first.seq)) first = timer;
    }
    return first;
  }

  #moveTo(monotonic: number): void {
    if (monotonic <= this.#monotonic) return;
    this.#wall += monotonic - this.#monotonic;
    this.#monotonic = monotonic;
  }
}

/** Lets the promise chains that a fired timer started run to their next real wait. */
async function settle(): Promise<void> {
  for (let i = 0; i < 5; i++) await turn();
}

import { performance } from "node:perf_hooks";

const TICK_MS = 100;
/** How far back /healthz looks for a stall. */
const WINDOW_MS = 10_000;

/** A stall that ended: how long the event loop was blocked. */
export interface EventLoopStall {
  durationMs: number;
}

export interface EventLoopMonitorOptions {
  /** Called once per stall of at least `stallMs`, when it ends (the loop turns again). Must not throw. */
  onStall?: (stall: EventLoopStall) => void;
  stallMs?: number;
}

/**
 * The event loop's delays, from the drift of a 100 ms timer. A loop blocked by synchronous work
 * answers /healthz late, or not at all; once it answers again, the stall it suffered is still in
 * the 10 s window, so a liveness probe sees it either way (maxDelayMs). With `onStall`, each stall
 * of at least `stallMs` is reported once, with its length, when it ends (the engine logs and
 * counts it: src/engine/agendaEngine.ts).
 */
export class EventLoopMonitor {
  readonly #timer: NodeJS.Timeout;
  #lastTick = performance.now();
  /** Delays above one tick, with when they ended. */
  #stalls: Array<{ at: number; delayMs: number }> = [];

  constructor(options: EventLoopMonitorOptions = {}) {
    const { onStall, stallMs = Number.POSITIVE_INFINITY } = options;
    this.#timer = setInterval(() => {
      const now = performance.now();
      const delayMs = now - this.#lastTick - TICK_MS;
      this.#lastTick = now;
      this.#stalls = this.#stalls.filter((stall) => now - stall.at < WINDOW_MS);
      if (delayMs > TICK_MS) this.#stalls.push({ at: now, delayMs });
      if (delayMs >= stallMs) onStall?.({ durationMs: Math.round(delayMs) });
    }, TICK_MS);
    this.#timer.unref();
  }

  /** The largest delay in the last 10 s, including one still in progress, in milliseconds. */
  maxDelayMs(): number {
    const now = performance.now();
    const current = Math.max(0, now - this.#lastTick - TICK_MS);
    return this.#stalls.reduce(
      (max, stall) => (now - stall.at < WINDOW_MS ? Math.max(max, stall.delayMs) : max),
      current,
    );
  }

  close(): void {
    clearInterval(this.#timer);
  }
}

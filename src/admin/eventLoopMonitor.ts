import { type IntervalHistogram, monitorEventLoopDelay } from "node:perf_hooks";

/** Windows over which the largest event-loop delay is kept; /healthz looks at the last two. */
const WINDOW_MS = 5_000;

/**
 * The event loop's worst delay over the last 5-10 s (perf_hooks.monitorEventLoopDelay). A loop
 * blocked by synchronous work answers /healthz late, or not at all; once it answers again, the
 * delay it suffered is still in the window, so a liveness probe sees the stall either way.
 */
export class EventLoopMonitor {
  readonly #histogram: IntervalHistogram;
  readonly #timer: NodeJS.Timeout;
  #previousMaxMs = 0;

  constructor() {
    this.#histogram = monitorEventLoopDelay({ resolution: 20 });
    this.#histogram.enable();
    this.#timer = setInterval(() => {
      this.#previousMaxMs = this.#histogram.max / 1e6;
      this.#histogram.reset();
    }, WINDOW_MS);
    this.#timer.unref();
  }

  /** The largest delay seen in the current and the previous window, in milliseconds. */
  maxDelayMs(): number {
    return Math.max(this.#previousMaxMs, this.#histogram.max / 1e6);
  }

  close(): void {
    clearInterval(this.#timer);
    this.#histogram.disable();
  }
}

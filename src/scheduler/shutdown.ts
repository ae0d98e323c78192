import type { Logger } from "../core/logger.js";

export interface ShutdownOptions {
  logger: Logger;
  /** Runs once, on the first SIGTERM or SIGINT: drain, close, clean up. */
  shutdown: (signal: NodeJS.Signals) => Promise<void>;
  /**
   * Runs on the signal that exits at once, just before the exit: what must not outlive the process
   * (the embedded PostgreSQL is asked to stop). Synchronous; an error is logged and the exit goes on.
   */
  beforeExitAtOnce?: () => void;
  /** Defaults to process.exit; tests replace it. */
  exit?: (code: number) => void;
  /** Monotonic milliseconds; tests replace it. */
  now?: () => number;
}

/**
 * A signal this soon after the first is the same request delivered twice, not an operator asking
 * to exit at once: Ctrl-C in a terminal, or a kill of the process group, reaches both `npm start`
 * and node, and npm forwards its copy.
 */
export const REPEATED_SIGNAL_MS = 1_000;

/**
 * First SIGTERM/SIGINT: run `shutdown` (stop taking runs, drain, close the pool), then exit
 * explicitly (Agenda can leave a timer that keeps the process alive for minutes). A second
 * signal, REPEATED_SIGNAL_MS or more after the first, runs `beforeExitAtOnce` and exits at once.
 * Returns a function that removes the handlers.
 */
export function handleShutdownSignals(options: ShutdownOptions): () => void {
  const exit = options.exit ?? ((code: number) => process.exit(code));
  const now = options.now ?? (() => performance.now());
  let firstAt: number | undefined;
  const onSignal = (signal: NodeJS.Signals) => {
    if (firstAt !== undefined) {
      if (now() - firstAt < REPEATED_SIGNAL_MS) {
        options.logger.info(
          { signal },
          `${signal} again within ${REPEATED_SIGNAL_MS} ms: taken as the same request (still shutting down; send it again later to exit at once)`,
        );
        return;
      }
      options.logger.warn({ signal }, `second ${signal}: exiting at once without waiting for running tasks`);
      try {
        options.beforeExitAtOnce?.();
      } catch (error) {
        options.logger.error({ err: error }, "clean-up before exiting at once failed");
      }
      exit(130);
      return;
    }
    firstAt = now();
    options.logger.info({ signal }, `${signal} received: shutting down (send it again to exit at once)`);
    options.shutdown(signal).then(
      () => exit(0),
      (error: unknown) => {
        options.logger.error({ err: error }, "shutdown failed");
        exit(1);
      },
    );
  };
  process.on("SIGTERM", onSignal);
  process.on("SIGINT", onSignal);
  return () => {
    process.off("SIGTERM", onSignal);
    process.off("SIGINT", onSignal);
  };
}

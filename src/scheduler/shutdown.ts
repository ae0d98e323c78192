import type { Logger } from "../core/logger.js";

export interface ShutdownOptions {
  logger: Logger;
  /** Runs once, on the first SIGTERM or SIGINT: drain, close, clean up. */
  shutdown: (signal: NodeJS.Signals) => Promise<void>;
  /** Defaults to process.exit; tests replace it. */
  exit?: (code: number) => void;
}

/**
 * First SIGTERM/SIGINT: run `shutdown` (stop taking runs, drain, close the pool), then exit
 * explicitly (Agenda can leave a timer that keeps the process alive for minutes). A second
 * signal exits at once. Returns a function that removes the handlers.
 */
export function handleShutdownSignals(options: ShutdownOptions): () => void {
  const exit = options.exit ?? ((code: number) => process.exit(code));
  let shuttingDown = false;
  const onSignal = (signal: NodeJS.Signals) => {
    if (shuttingDown) {
      options.logger.warn({ signal }, `second ${signal}: exiting at once without waiting for running tasks`);
      exit(130);
      return;
    }
    shuttingDown = true;
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

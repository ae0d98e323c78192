import { backoffDelay, jittered } from "../core/backoff.js";
import type { Clock } from "../core/clock.js";

const CONNECTION_ERROR_CODES = new Set([
  "ECONNREFUSED",
  "ECONNRESET",
  "EPIPE",
  "ETIMEDOUT",
  "ENOTFOUND",
  "EHOSTUNREACH",
]);

/**
 * True for errors that mean "the database could not be reached or dropped the connection", as
 * opposed to errors about the statement: SQLSTATE class 08 (connection exception), 57P01-57P03
 * (server shutting down or starting), socket errors, and pg's own closed-connection messages.
 */
export function isConnectionError(error: unknown): boolean {
  if (!(error instanceof Error)) return false;
  const code = (error as { code?: unknown }).code;
  if (typeof code === "string") {
    if (code.startsWith("08") || code === "57P01" || code === "57P02" || code === "57P03") return true;
    if (CONNECTION_ERROR_CODES.has(code)) return true;
  }
  return /Connection terminated|connection timeout|Client has encountered a connection error|Cannot use a pool after calling end/i.test(
    error.message,
  );
}

export interface RetryOptions {
  /** Gives up (rethrows the last error) after this long. */
  maxElapsedMs: number;
  initialDelayMs?: number;
  maxDelayMs?: number;
  /** The waits and the time spent (src/core/clock.ts). */
  clock: Clock;
  /** Called before each wait, e.g. to log once. */
  onRetry?: (error: Error, attempt: number) => void;
}

/** Runs `operation`, retrying with jittered backoff while it fails with a connection error. */
export async function retryWhileDisconnected<T>(
  operation: () => Promise<T>,
  options: RetryOptions,
): Promise<T> {
  const { clock } = options;
  const startedAt = clock.monotonic();
  const backoff = { initialMs: options.initialDelayMs ?? 250, maxMs: options.maxDelayMs ?? 2_000 };
  for (let attempt = 1; ; attempt++) {
    try {
      return await operation();
    } catch (error) {
      const delay = backoffDelay(attempt, backoff);
      if (!isConnectionError(error) || clock.monotonic() - startedAt + delay > options.maxElapsedMs)
        throw error;
      options.onRetry?.(error as Error, attempt);
      await clock.sleep(jittered(delay));
    }
  }
}

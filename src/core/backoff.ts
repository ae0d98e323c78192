import { setTimeout as delay } from "node:timers/promises";

export interface BackoffOptions {
  /** The delay after the first failure. */
  initialMs: number;
  /** The delay never grows past this. */
  maxMs: number;
}

/**
 * The one exponential backoff of the code base (config sources, the engine's retries while the
 * database is unreachable, the wait for the database at start-up).
 */

/** The delay after `failures` consecutive failures (1, 2, ...): `initialMs * 2^(failures-1)`, capped at `maxMs`. */
export function backoffDelay(failures: number, { initialMs, maxMs }: BackoffOptions): number {
  return Math.min(maxMs, initialMs * 2 ** Math.min(Math.max(failures - 1, 0), 30));
}

/** `ms` spread uniformly over ±25%, so that instances that failed together do not retry in step. */
export function jittered(ms: number): number {
  return ms * (0.75 + Math.random() / 2);
}

/** backoffDelay() jittered and rounded to whole ms: the delay before the next attempt. */
export function retryDelay(failures: number, options: BackoffOptions): number {
  return Math.round(jittered(backoffDelay(failures, options)));
}

/** Waits `ms`, or less if `signal` aborts; never rejects and never keeps the process alive. */
export async function sleep(ms: number, signal: AbortSignal): Promise<void> {
  await delay(ms, undefined, { signal, ref: false }).catch(() => undefined);
}

/** A delay for a log line: "250 ms", "2.5 s", "40 s". */
export function formatDelay(ms: number): string {
  if (ms < 1_000) return `${Math.round(ms)} ms`;
  return `${(ms / 1000).toFixed(ms < 10_000 ? 1 : 0)} s`;
}

import { backoffDelay } from "../core/backoff.js";
import type { Clock } from "../core/clock.js";
import { toError } from "../core/logger.js";
import type { RetryPolicy } from "../core/runTypes.js";
import type { ShardOutcome } from "./outcome.js";
import { storedJson } from "./shardPlan.js";

/**
 * One shard's attempts on this instance (src/sharding/shardWorker.ts claims it): the handler with
 * the task's timeout per attempt and its retries within the claim, with the task's backoff. Its
 * returned value is checked here (src/sharding/shardPlan.ts storedJson): a value too large fails
 * the shard with the reason, and is not retried (the same code would return the same).
 */

/** What a shard's handler is called with (the scheduler builds the TaskContext from it). */
export interface ShardRun {
  taskName: string;
  scheduledAt: Date;
  round: number;
  index: number;
  count: number;
  parameter: unknown;
  trigger: string;
  attempt: number;
  /** When this attempt started. */
  startedAt: Date;
  /** Fires at the timeout, when the lease is lost, or when the drain cuts the shard off. */
  signal: AbortSignal;
  /** The shard had been started before by an instance that died or lost its lease. */
  rerun: boolean;
}

/** The timeout and retries of a task's shards: the task's own (docs/sharding.md, "Timeouts and retries"). */
export interface ShardTaskPolicy {
  timeoutMs?: number | undefined;
  retry?: RetryPolicy | undefined;
}

export interface ShardAttemptsResult {
  outcome: ShardOutcome;
  attempts: number;
  /** From the first attempt's start to the last one's end. */
  durationMs: number;
  result: string | null;
  error: string | null;
  /** The shard was given up without an outcome: the lease lost or the drain's cut-off. */
  abandoned?: string;
}

const DEFAULT_RETRY_DELAY_MS = 1_000;
const DEFAULT_RETRY_MAX_DELAY_MS = 60_000;

/** Runs a shard's attempts until one succeeds, the retries run out, or `stop` fires (then abandoned). */
export async function runShardAttempts(args: {
  run: Omit<ShardRun, "attempt" | "signal" | "startedAt">;
  policy: ShardTaskPolicy;
  execute: (run: ShardRun) => Promise<unknown>;
  /** Fires when the shard must stop here: its lease lost, or the drain's deadline. */
  stop: AbortSignal;
  clock: Clock;
}): Promise<ShardAttemptsResult> {
  const { run, policy, execute, stop, clock } = args;
  const started = clock.monotonic();
  const maxAttempts = 1 + (policy.retry?.maxRetries ?? 0);
  let error = "";
  for (let attempt = 1; attempt <= maxAttempts; attempt++) {
    const ended = await oneAttempt(run, attempt, policy.timeoutMs, execute, stop, clock);
    const durationMs = clock.monotonic() - started;
    if (stop.aborted)
      return {
        outcome: "failed",
        attempts: attempt,
        durationMs,
        result: null,
        error: null,
        abandoned: String(stop.reason),
      };
    if (ended.ok) {
      try {
        const result = storedJson(
          `the value shard ${run.index} of task "${run.taskName}" returned`,
          ended.value,
        );
        return { outcome: "succeeded", attempts: attempt, durationMs, result, error: null };
      } catch (invalid) {
        return {
          outcome: "failed",
          attempts: attempt,
          durationMs,
          result: null,
          error: toError(invalid).message,
        };
      }
    }
    error = ended.error;
    if (attempt < maxAttempts) {
      const delayMs = backoffDelay(attempt, {
        initialMs: policy.retry?.delayMs ?? DEFAULT_RETRY_DELAY_MS,
        maxMs: policy.retry?.maxDelayMs ?? DEFAULT_RETRY_MAX_DELAY_MS,
      });
      await clock.sleep(delayMs, stop).catch(() => {});
    }
  }
  return {
    outcome: "failed",
    attempts: maxAttempts,
    durationMs: clock.monotonic() - started,
    result: null,
    error,
  };
}

type AttemptEnd = { ok: true; value: unknown } | { ok: false; error: string };

/** One attempt: the handler raced with its timeout (which fires its signal) and with `stop`. */
async function oneAttempt(
  run: Omit<ShardRun, "attempt" | "signal" | "startedAt">,
  attempt: number,
  timeoutMs: number | undefined,
  execute: (run: ShardRun) => Promise<unknown>,
  stop: AbortSignal,
  clock: Clock,
): Promise<AttemptEnd> {
  const controller = new AbortController();
  const forward = () => controller.abort(stop.reason);
  stop.addEventListener("abort", forward, { once: true });
  let timer: ReturnType<Clock["setTimeout"]> | undefined;
  const timedOut = new Promise<AttemptEnd>((resolve) => {
    if (timeoutMs === undefined) return;
    timer = clock.setTimeout(() => {
      const error = new Error(`shard ${run.index} timed out after ${timeoutMs} ms`);
      controller.abort(error);
      resolve({ ok: false, error: error.message });
    }, timeoutMs);
  });
  const stopped = new Promise<AttemptEnd>((resolve) => {
    const end = () => resolve({ ok: false, error: `stopped: ${String(stop.reason)}` });
    if (stop.aborted) end();
    else stop.addEventListener("abort", end, { once: true });
  });
  try {
    const handled = Promise.resolve()
      .then(() => execute({ ...run, attempt, startedAt: new Date(clock.now()), signal: controller.signal }))
      .then(
        (value): AttemptEnd => ({ ok: true, value }),
        (error: unknown): AttemptEnd => ({ ok: false, error: toError(error).message }),
      );
    return await Promise.race([handled, timedOut, stopped]);
  } finally {
    clock.clearTimeout(timer);
    stop.removeEventListener("abort", forward);
  }
}

/**
 * The run vocabulary every layer shares (engine, scheduler, status, public API), declared once here.
 */

/**
 * How a slot's run ended. `interrupted`: cut off at shutdown and handed to another instance, which
 * re-runs its slot (not a failure). `lock-lost`: another instance took the run's lock while it ran
 * (this process was stopped or cut off for longer than the lock lifetime) and re-runs the slot; the
 * run's own end does not count (docs/locks-and-failover.md). Neither is a slot's final outcome.
 */
export type RunOutcome = "succeeded" | "failed" | "skipped" | "interrupted" | "lock-lost";

/** How one attempt ended (a skip is no attempt). */
export type AttemptOutcome = Exclude<RunOutcome, "skipped">;

/** The run a re-run repeats: it started and never finished (its instance died or lost the lock). */
export interface PreviousRun {
  scheduledAt: Date | null;
  startedAt: Date;
  instanceId: string | null;
  /** The W3C traceparent of its span, when it was traced and its start row is read (docs/tracing.md). */
  traceparent?: string | undefined;
}

/** A task's retry policy: exponential backoff with a cap, within the same slot. */
export interface RetryPolicy {
  /** Attempts after the first failure. */
  maxRetries: number;
  /** Delay before the first retry (ms); doubles each time. Default 1000. */
  delayMs?: number;
  /** Cap on the delay (ms). Default 60 000. */
  maxDelayMs?: number;
}

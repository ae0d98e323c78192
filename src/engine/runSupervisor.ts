import { type Clock, type ClockTimer, systemClock } from "../core/clock.js";
import { toError } from "../core/logger.js";
import type { RunResult } from "./engineApi.js";

export interface SuperviseOptions {
  taskName: string;
  startedAt: Date;
  run: () => Promise<void>;
  /**
   * Called right after `run` is called (in the same turn, unless `quietMs`), before the run's end
   * is reported: the run's bookkeeping (its start record, log line and events) follows the
   * handler's call instead of delaying it. Must not throw.
   */
  started?: () => void;
  /**
   * Put `started` and the run's end off by so many ms after the handler's call (0: no delay). A
   * run started at its slot passes what is left of QUIET_AFTER_SLOT_MS (src/engine/slotWait.ts).
   * The duration ends when the handler settled; the timeout counts from the call, and fires the
   * handler's signal no earlier than the quiet spell's end.
   */
  quietMs?: number;
  /** Fires the handler's AbortSignal with the reason. */
  abort: (reason: Error) => void;
  /** Resolves with a reason if the watchdog loses the lock. */
  lockLost: Promise<string>;
  timeoutMs: number | undefined;
  /** After the timeout, how long a handler that ignores its signal is waited for. */
  graceMs: number;
  onLockLost: (reason: string) => void;
  onAbandoned: (reason: string) => void;
  /** The time and timers (src/core/clock.ts); the system's by default. */
  clock?: Clock;
}

export class RunTimeoutError extends Error {
  override name = "RunTimeoutError";
}
export class LockLostError extends Error {
  override name = "LockLostError";
}

type Event =
  | { kind: "settled"; error: Error | undefined }
  | { kind: "lost"; reason: string }
  | { kind: "deadline" };

/**
 * Decides how one run ends. The handler's own end decides, unless first:
 * - the lock is lost: the signal fires and the run is failed at once (another instance owns the
 *   slot now; waiting would not make it ours again);
 * - the timeout passes: the signal fires and the run is failed "timed out", but the lock stays
 *   held (the caller keeps renewing) until the handler settles, so a handler that ignores its
 *   signal still never overlaps the next run; after `graceMs` more it is abandoned.
 */
export async function superviseRun(options: SuperviseOptions): Promise<Omit<RunResult, "final">> {
  const clock = options.clock ?? systemClock;
  const now = () => clock.now();
  let handled: Promise<void>;
  try {
    handled = Promise.resolve(options.run());
  } catch (thrown) {
    handled = Promise.reject(thrown);
  }
  let settledAt: number | undefined;
  const settled: Promise<Event> = handled.then(
    () => {
      settledAt = now();
      return { kind: "settled", error: undefined } as const;
    },
    (thrown: unknown) => {
      settledAt = now();
      return {
        kind: "settled",
        error: toError(thrown, `task "${options.taskName}" failed without an error value`),
      } as const;
    },
  );
  const lost: Promise<Event> = options.lockLost.then((reason) => ({ kind: "lost", reason }) as const);
  const timers: ClockTimer[] = [];
  const after = (ms: number): Promise<Event> =>
    new Promise((resolve) => timers.push(clock.setTimeout(() => resolve({ kind: "deadline" }), ms)));
  const finish = (error?: Error): Omit<RunResult, "final"> => ({
    outcome: error instanceof LockLostError ? "lock-lost" : error ? "failed" : "succeeded",
    durationMs: (settledAt ?? now()) - options.startedAt.getTime(),
    ...(error ? { error } : {}),
  });
  const loseLock = (reason: string): Omit<RunResult, "final"> => {
    const error = new LockLostError(`lock lost: ${reason}`);
    options.abort(error);
    options.onLockLost(reason);
    return finish(error);
  };

  try {
    const racers = [settled, lost];
    if (options.timeoutMs !== undefined) racers.push(after(options.timeoutMs));
    const { quietMs } = options;
    if (quietMs) await new Promise<void>((resolve) => timers.push(clock.setTimeout(resolve, quietMs)));
    options.started?.();
    const first = await Promise.race(racers);
    if (first.kind === "settled") return finish(first.error);
    if (first.kind === "lost") return loseLock(first.reason);

    const seconds = formatSeconds(options.timeoutMs ?? 0);
    const timedOut = new RunTimeoutError(`timed out after ${seconds}`);
    options.abort(timedOut);
    const second = await Promise.race([settled, lost, after(options.graceMs)]);
    if (second.kind === "settled") return finish(timedOut);
    if (second.kind === "lost") return loseLock(second.reason);
    const reason = `timed out after ${seconds} and ignored its abort signal for ${formatSeconds(options.graceMs)} more; the lock is released while the handler may still be running`;
    options.onAbandoned(reason);
    return finish(new RunTimeoutError(reason));
  } finally {
    for (const timer of timers) clock.clearTimeout(timer);
  }
}

function formatSeconds(ms: number): string {
  return ms % 1000 === 0 ? `${ms / 1000} s` : `${(ms / 1000).toFixed(1)} s`;
}

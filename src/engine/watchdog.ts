import { type Clock, type ClockTimer, systemClock } from "../core/clock.js";
import type { Logger } from "../core/logger.js";
import { toError } from "../core/logger.js";
import { type LockRenewal, lockTakenReason } from "./sql/claim.js";

/** The one database operation the watchdog needs: a fenced lock renewal (src/engine/sql/claim.ts RENEW_LOCK_SQL). */
export interface LockRenewer {
  /** Moves the lock from `expected` to `next`, or says who holds the row now. */
  renewLock(jobId: string, expected: Date, next: Date): Promise<LockRenewal>;
}

/**
 * Keeps the locks of running jobs: `watch` starts renewing one; the function it returns stops and
 * waits until the lock time in the row is known, so that the caller's final save is fenced on it.
 * Two kinds: the lock keeper's thread (src/engine/lockKeeper.ts, the default) and the in-process
 * Watchdog below.
 */
export interface LockWatcher {
  watch(lock: WatchedLock, events: WatchEvents): () => Promise<void>;
}

export interface WatchdogOptions {
  renewer: LockRenewer;
  lockLifetimeMs: number;
  /** How often a held lock is renewed; a third of the lifetime leaves two retries before expiry. */
  renewEveryMs?: number;
  logger: Logger;
  /** The time lock times are written with, and the renewal timers (src/core/clock.ts). */
  clock?: Clock;
}

/** A lock's holder (src/engine/slotRun.ts): the lock time lives there, and the watchdog renews through it. */
export interface WatchedLock {
  readonly jobId: string;
  readonly taskName: string;
  /** The lock time the holder wrote last: each renewal is fenced on it. */
  readonly heldLockAt: Date | undefined;
  /** After each renewal, with the new lock time (the new fencing value). */
  renewed(lockedAt: Date): void;
}

export interface WatchEvents {
  /** Called after each renewal. */
  onRenewed?(): void;
  /** Called once when the lock is lost; renewal stops. */
  onLost(reason: string): void;
}

/**
 * The in-process lock watcher (used when the lock keeper's thread cannot be: src/engine/lockKeeper.ts).
 * Renews the lock of each running job so that a long run is never taken over while it is alive
 * (Agenda re-runs a job whose lock expired even while the first run goes on). Each renewal is a
 * compare-and-set on the lock time this instance last wrote: "0 rows" means another instance
 * holds the lock now. A renewal that keeps failing (database unreachable) past the lock lifetime
 * counts as lost too, since another instance may take the job over from then on.
 */
export class Watchdog implements LockWatcher {
  readonly #options: Required<Omit<WatchdogOptions, "logger">> & { logger: Logger };

  constructor(options: WatchdogOptions) {
    this.#options = {
      renewEveryMs: Math.max(250, Math.floor(options.lockLifetimeMs / 3)),
      clock: systemClock,
      ...options,
    };
  }

  get renewEveryMs(): number {
    return this.#options.renewEveryMs;
  }

  /**
   * Starts renewing. The returned function stops and waits for a renewal in flight, so that the
   * caller's final save is fenced on the lock time really in the row.
   */
  watch(lock: WatchedLock, events: WatchEvents): () => Promise<void> {
    const { renewer, lockLifetimeMs, renewEveryMs, logger, clock } = this.#options;
    const now = () => new Date(clock.now());
    let lastRenewal = lock.heldLockAt?.getTime() ?? clock.now();
    let stopped = false;
    let timer: ClockTimer | undefined;
    let inFlight: Promise<void> | undefined;

    const lose = (reason: string) => {
      if (stopped) return;
      stopped = true;
      events.onLost(reason);
    };
    const tick = async () => {
      if (stopped) return;
      const next = now();
      const expected = lock.heldLockAt;
      try {
        const renewal = expected ? await renewer.renewLock(lock.jobId, expected, next) : undefined;
        if (renewal?.renewed) {
          lastRenewal = next.getTime();
          lock.renewed(next);
          events.onRenewed?.();
        } else lose(lockTakenReason(renewal?.found));
      } catch (thrown) {
        const silentFor = now().getTime() - lastRenewal;
        if (silentFor >= lockLifetimeMs) {
          lose(
            `the lock could not be renewed for ${Math.round(silentFor / 1000)} s: ${toError(thrown).message}`,
          );
        } else {
          logger.warn(
            { err: thrown, task: lock.taskName, jobId: lock.jobId },
            "lock renewal failed; retrying before the lock expires",
          );
        }
      }
      if (!stopped) schedule();
    };
    const schedule = () => {
      timer = clock.setTimeout(() => {
        inFlight = tick().finally(() => {
          inFlight = undefined;
        });
      }, renewEveryMs);
    };
    schedule();
    return async () => {
      stopped = true;
      clock.clearTimeout(timer);
      await inFlight;
    };
  }
}

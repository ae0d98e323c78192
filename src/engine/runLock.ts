import type { Logger } from "../core/logger.js";
import type { EngineHooks, EngineRun, RunResult } from "./engineApi.js";
import { LockLostError } from "./runSupervisor.js";
import type { SlotRun } from "./slotRun.js";
import type { LockWatcher } from "./watchdog.js";

type AttemptResult = Omit<RunResult, "final">;

/**
 * One run's lock, kept from the handler's wait for its slot to its last attempt's end by the lock
 * keeper (src/engine/lockKeeper.ts), through the run itself (SlotRun.heldLockAt). It knows whether
 * the lock was lost and why, and it decides the one rule about a lost lock and an outcome: an
 * attempt that ended while another instance held the lock is `lock-lost`, whatever its handler
 * returned (docs/locks-and-failover.md, "Lost locks are recorded as such").
 */
export class RunLock {
  /** Resolves with the reason once the lock is lost. */
  readonly lost: Promise<string>;
  readonly #logger: Logger;
  readonly #hooks: EngineHooks;
  readonly #stopWatch: () => Promise<void>;
  #reason: string | undefined;
  #stopped: Promise<void> | undefined;

  constructor(run: SlotRun, deps: { watcher: LockWatcher; logger: Logger; hooks: EngineHooks }) {
    this.#logger = deps.logger;
    this.#hooks = deps.hooks;
    let lose: (reason: string) => void = () => {};
    this.lost = new Promise<string>((resolve) => {
      lose = resolve;
    });
    this.#stopWatch = deps.watcher.watch(run, {
      onRenewed: () => deps.hooks.lockRenewed?.(run.taskName),
      onLost: (reason) => {
        this.#reason = reason;
        lose(reason);
      },
    });
  }

  /** Why the lock was lost; undefined while it is held. */
  get reason(): string | undefined {
    return this.#reason;
  }

  /** Stops renewing, once, and waits for the lock keeper's last word on the lock. */
  stop(): Promise<void> {
    this.#stopped ??= this.#stopWatch();
    return this.#stopped;
  }

  /**
   * The run's last attempt ended: the watch stops here, before the outcome is reported. A lost
   * lock the handler could not be told of (this process was stopped, e.g. SIGSTOP, for longer than
   * the lock lifetime) makes the attempt `lock-lost`: the taker re-runs the slot, so this run must
   * not also count as its success.
   */
  async keptThrough(run: EngineRun, result: AttemptResult): Promise<AttemptResult> {
    await this.stop();
    const reason = this.#reason;
    if (reason === undefined || result.outcome === "lock-lost") return result;
    this.reportLost(run, reason);
    return {
      outcome: "lock-lost",
      error: new LockLostError(`lock lost: ${reason}`),
      durationMs: result.durationMs,
    };
  }

  /** The log line and the hook (the `run:lock-lost` event and alert) of a lost lock. */
  reportLost(run: EngineRun, reason: string): void {
    this.#logger.error(
      { task: run.taskName, slot: run.scheduledAt, reason },
      `lock lost: ${reason}; the run is recorded lock-lost and the lock's new holder re-runs the slot`,
    );
    this.#hooks.lockLost?.(run, reason);
  }
}

import type { Pool, PoolClient } from "pg";
import { type Logger, toError } from "../core/logger.js";
import { inTransaction } from "../db/transaction.js";
import type { ExtraChannel } from "./notificationChannel.js";
import { deletePause, insertPause, PAUSE_CHANNEL, type PauseRow, selectPause } from "./sql/pauseAll.js";

/** The namespace's pause-all switch while it is on. */
export interface PauseState {
  pausedAt: Date;
  pausedBy: string;
  reason: string;
}

export interface PauseGateOptions {
  pool: Pool;
  namespace: string;
  logger: Logger;
  /** The switch went off here: due jobs may be claimed at once. */
  onLifted(): void;
}

/**
 * This instance's view of its namespace's pause-all switch (docs/operations.md, "Pause all"). The
 * switch is a row in the database (src/engine/sql/pauseAll.ts); every change to it is announced on
 * PAUSE_CHANNEL, which this gate hears on the engine's LISTEN connection (src/engine/
 * notificationChannel.ts) and answers by reading the row again: a change reaches every instance as
 * fast as a job notification, with no statement while nothing changes. After each (re)connect of
 * that connection the row is read again, since a change sent meanwhile was not heard.
 *
 * While it is on, the claim loop claims nothing (src/engine/claimedRuns.ts) and a run claimed
 * before gives its slot back untouched before its handler (src/engine/runChecks.ts): the job rows
 * are never changed, so their slots stay due and, once the switch is off, each task's catch-up
 * policy decides about the slots missed meanwhile, exactly as after a re-enable.
 */
export class PauseGate {
  readonly #options: PauseGateOptions;
  #state: PauseState | undefined;
  #reading: Promise<void> | undefined;
  #readAgain = false;

  constructor(options: PauseGateOptions) {
    this.#options = options;
  }

  get paused(): boolean {
    return this.#state !== undefined;
  }

  get state(): PauseState | undefined {
    return this.#state;
  }

  /** What the engine's LISTEN connection hears for this gate. */
  channel(): ExtraChannel {
    return {
      name: PAUSE_CHANNEL,
      onMessage: (namespace) => {
        if (namespace === this.#options.namespace) void this.refresh();
      },
      onListening: () => void this.refresh(),
    };
  }

  /**
   * Reads the switch; one read at a time, and one more after it when asked meanwhile (a change may
   * have come after the read in flight saw the row). A failed read keeps the state it had.
   */
  refresh(): Promise<void> {
    if (this.#reading) {
      this.#readAgain = true;
      return this.#reading;
    }
    this.#reading = (async () => {
      do {
        this.#readAgain = false;
        try {
          this.#apply(await selectPause(this.#options.pool, this.#options.namespace));
        } catch (error) {
          this.#options.logger.warn(
            { err: toError(error) },
            "pause-all: could not read the switch; keeping the state this instance had",
          );
        }
      } while (this.#readAgain);
    })().finally(() => {
      this.#reading = undefined;
    });
    return this.#reading;
  }

  #apply(row: PauseRow | undefined): void {
    const was = this.#state;
    this.#state = row && { pausedAt: row.paused_at, pausedBy: row.paused_by, reason: row.reason };
    if (!was && this.#state)
      this.#options.logger.warn(
        { pausedBy: this.#state.pausedBy, reason: this.#state.reason },
        `pause-all is on for namespace "${this.#options.namespace}": no run starts until it is lifted`,
      );
    if (was && !this.#state) {
      this.#options.logger.info(
        `pause-all lifted for namespace "${this.#options.namespace}": slots missed meanwhile follow each task's catchUp`,
      );
      this.#options.onLifted();
    }
  }

  /**
   * Turns the switch on or off in one transaction with `record` (the audit entry), and applies it
   * here at once; the other instances hear it at commit. Answers the state before and after.
   */
  async set(
    on: boolean,
    by: string,
    reason: string,
    record: (db: PoolClient, before: PauseState | undefined) => Promise<void>,
  ): Promise<{ before: PauseState | undefined; after: PauseState | undefined }> {
    const { pool, namespace } = this.#options;
    const result = await inTransaction(pool, async (client) => {
      if (on) {
        const { row, changed } = await insertPause(client, namespace, by, reason);
        if (changed) await record(client, undefined);
        return { before: changed ? undefined : stateOf(row), after: stateOf(row) };
      }
      const removed = await deletePause(client, namespace);
      if (removed) await record(client, stateOf(removed));
      return { before: removed && stateOf(removed), after: undefined };
    });
    const after = result.after;
    this.#apply(after && { paused_at: after.pausedAt, paused_by: after.pausedBy, reason: after.reason });
    return result;
  }
}

function stateOf(row: PauseRow): PauseState {
  return { pausedAt: row.paused_at, pausedBy: row.paused_by, reason: row.reason };
}

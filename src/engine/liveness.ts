import type { Pool } from "pg";
import pg from "pg";
import { type Clock, type ClockTimer, systemClock } from "../core/clock.js";
import { type Logger, toError } from "../core/logger.js";
import {
  deregisterInstance,
  type InstanceDetails,
  type ReleasedJobRow,
  registerInstance,
  releaseDeadInstances,
  releasePreviousLife,
  selectDeadInstances,
  tryLivenessLock,
} from "./sql.js";

export interface InstanceLivenessOptions {
  /** The check, confirmation and reconnect timers (src/core/clock.ts); the system's by default. */
  clock?: Clock;
  /** The instances' pool: its connection settings open the dedicated session (not one of its connections). */
  pool: Pool;
  instanceId: string;
  /** How often the other instances' liveness is checked. */
  checkEveryMs: number;
  logger: Logger;
  /** Locks of dead instances were released: wake the workers for the jobs due now. */
  onReleased: (rows: ReleasedJobRow[]) => void;
  /** An instance first seen dead is checked again this long after; default CONFIRM_AFTER_MS, 0: at the next regular check. */
  confirmAfterMs?: number;
  /** After each check: whether its statement was answered (the database health, without a probe of its own). */
  onChecked?: (answered: boolean) => void;
  /**
   * The liveness session ended, and again when it is taken back: the server may have restarted
   * or failed over to a standby whose start time predates the failover (docs/locks-and-failover.md,
   * "Failover of the primary"), so the engine holds takeovers for a lock lifetime.
   */
  onSessionInterrupted?: () => void;
  /** What the registry shows of this instance (GET /instances). */
  details?: InstanceDetails;
}

/**
 * An instance first seen dead is checked again this long after (or at the next regular check, if
 * that comes sooner), not a whole interval later: the interval sets the idle load (one statement
 * per check), this the failover time. Long enough for a live instance whose liveness session
 * dropped to take its lock again (its first reconnect comes after 250 ms).
 */
export const CONFIRM_AFTER_MS = 500;

/**
 * An instance's liveness, made visible by PostgreSQL itself: a session-level advisory lock keyed by
 * the instance id, held on a dedicated session for the instance's lifetime. When the process dies
 * its connection closes and the server drops the lock; nothing has to expire. A registry table
 * names the instances that take part (an instance of an older version holds no such lock and must
 * not pass for dead).
 *
 * On the same session, every `checkEveryMs` (2 s by default), one statement lists the registered
 * instances whose lock is gone; an instance first seen dead is checked again CONFIRM_AFTER_MS later.
 * One seen dead by two checks in a row has its job locks released (src/engine/sql/instances.ts
 * releaseDeadInstances): the runs it had started are due at once and re-run as re-runs by whichever
 * instance locks them first, instead of waiting out the lock lifetime. The check's answer also
 * serves as the database health probe (DatabaseHealth.confirmUp), so an idle instance runs one
 * statement per check for both.
 *
 * What liveness cannot tell stays with the lock lifetime: a process stopped or cut off by the
 * network keeps its session (and its lock) until the server's TCP keepalive ends it. An instance
 * counts as dead only once it registered on the server now running: after a restart or a failover
 * every session was cut, and nobody is taken for dead before it could take its lock again.
 */
export class InstanceLiveness {
  readonly #options: InstanceLivenessOptions;
  readonly #clock: Clock;
  #client: pg.Client | undefined;
  #timer: ClockTimer | undefined;
  #confirmTimer: ClockTimer | undefined;
  #reconnectTimer: ClockTimer | undefined;
  #reconnectDelayMs = 250;
  #checking: Promise<void> | undefined;
  #stopped = false;
  /** Instances seen dead by the last check. */
  #suspects = new Set<string>();

  constructor(options: InstanceLivenessOptions) {
    this.#options = options;
    this.#clock = options.clock ?? systemClock;
  }

  /** Whether this instance's liveness lock is held now. */
  get live(): boolean {
    return this.#client !== undefined;
  }

  /**
   * Takes the lock and registers; then checks the others every `checkEveryMs`. A lock that cannot
   * be taken now (database unreachable, or the id's lock held by another session) is retried in
   * the background; until then the others fall back to the lock lifetime for this instance's runs.
   */
  async start(): Promise<void> {
    this.#stopped = false;
    try {
      await this.#connect(true);
    } catch (error) {
      this.#options.logger.warn(
        { err: toError(error) },
        `instance liveness: ${toError(error).message}; retrying (until then a crash of this instance is recovered after the lock lifetime)`,
      );
      this.#scheduleReconnect();
    }
    this.#timer = this.#clock.setInterval(() => this.#checkNow(), this.#options.checkEveryMs);
    this.#timer.unref();
  }

  #checkNow(): void {
    this.#checking ??= this.check().finally(() => {
      this.#checking = undefined;
    });
  }

  /** Deregisters, then closes the session (which drops the lock). */
  async stop(): Promise<void> {
    this.#stopped = true;
    this.#clock.clearInterval(this.#timer);
    this.#clock.clearTimeout(this.#confirmTimer);
    this.#clock.clearTimeout(this.#reconnectTimer);
    this.#timer = undefined;
    this.#confirmTimer = undefined;
    await this.#checking;
    const client = this.#client;
    this.#client = undefined;
    if (!client) return;
    try {
      await deregisterInstance(client, this.#options.instanceId);
    } catch (error) {
      this.#options.logger.debug({ err: toError(error) }, "instance liveness: could not deregister");
    }
    await client.end().catch(() => {});
  }

  /** `first`: this process has locked nothing yet, so locks held under its id are a dead process's. */
  async #connect(first = false): Promise<void> {
    const { pool, instanceId } = this.#options;
    const client = new pg.Client({ ...pool.options, keepAlive: true });
    // a session that dies (server restart, network) is an 'error' event: unhandled it would end the process
    client.on("error", (error) => this.#lost(client, error));
    client.on("end", () => this.#lost(client));
    try {
      await client.connect();
      if (!(await tryLivenessLock(client, instanceId))) {
        throw new Error(
          `the liveness lock of instance id "${instanceId}" is held by another session: another live process with the same id (give each instance its own, CRONWARDEN_INSTANCE_ID), or this id's previous process whose session has not ended yet`,
        );
      }
      await registerInstance(client, instanceId, this.#options.details);
      if (first) {
        const released = await releasePreviousLife(client, instanceId);
        if (released.length > 0) {
          this.#options.logger.warn(
            { tasks: released.map((row) => row.name) },
            `instance liveness: released ${released.length} lock(s) this instance id's previous process held when it died`,
          );
          this.#options.onReleased(released);
        }
      }
    } catch (error) {
      client.removeAllListeners("end");
      await client.end().catch(() => {});
      throw error;
    }
    if (this.#stopped) {
      await client.end().catch(() => {});
      return;
    }
    this.#client = client;
    this.#reconnectDelayMs = 250;
    this.#suspects.clear();
    if (!first) this.#options.onSessionInterrupted?.();
  }

  #lost(client: pg.Client, error?: Error): void {
    if (this.#client !== client) return;
    this.#client = undefined;
    client.removeAllListeners("end");
    void client.end().catch(() => {});
    if (this.#stopped) return;
    this.#options.onSessionInterrupted?.();
    this.#options.logger.warn(
      { err: error },
      "instance liveness: the liveness session ended; taking the lock again",
    );
    this.#scheduleReconnect();
  }

  #scheduleReconnect(): void {
    if (this.#stopped || this.#reconnectTimer) return;
    const delay = this.#reconnectDelayMs;
    this.#reconnectDelayMs = Math.min(this.#reconnectDelayMs * 2, 5_000);
    this.#reconnectTimer = this.#clock.setTimeout(() => {
      this.#reconnectTimer = undefined;
      this.#connect().catch((error: unknown) => {
        // after a restart this instance's old session may linger on the server for a moment
        this.#options.logger.debug(
          { err: toError(error) },
          "instance liveness: lock not taken yet; retrying",
        );
        this.#scheduleReconnect();
      });
    }, delay);
    this.#reconnectTimer.unref();
  }

  /** One check (the timer's; tests call it by hand). */
  async check(): Promise<void> {
    const client = this.#client;
    const { instanceId, logger } = this.#options;
    if (!client) return;
    try {
      const dead = await selectDeadInstances(client, instanceId);
      this.#options.onChecked?.(true);
      // seen dead by two checks in a row: an instance whose session dropped and came back within a
      // check keeps its runs
      const confirmed = dead.filter((id) => this.#suspects.has(id));
      const suspected = dead.some((id) => !this.#suspects.has(id));
      this.#suspects = new Set(dead);
      if (suspected) this.#scheduleConfirmation();
      if (confirmed.length === 0) return;
      const released = await releaseDeadInstances(client, instanceId, confirmed);
      for (const id of confirmed) this.#suspects.delete(id);
      if (released.length > 0) {
        logger.warn(
          {
            instances: [...new Set(released.map((row) => row.dead_instance))],
            tasks: released.map((row) => row.name),
          },
          `instance liveness: released ${released.length} lock(s) of dead instance(s); their started runs are re-run now`,
        );
        this.#options.onReleased(released);
      }
    } catch (error) {
      logger.debug({ err: toError(error) }, "instance liveness check failed");
      this.#options.onChecked?.(false);
      if (this.#client === client) this.#lost(client, toError(error));
    }
  }

  /** A new suspect: the confirming check comes `confirmAfterMs` later, unless the regular one is sooner. */
  #scheduleConfirmation(): void {
    const delay = this.#options.confirmAfterMs ?? CONFIRM_AFTER_MS;
    if (this.#stopped || this.#confirmTimer || delay <= 0 || this.#options.checkEveryMs <= delay) return;
    this.#confirmTimer = this.#clock.setTimeout(() => {
      this.#confirmTimer = undefined;
      if (!this.#stopped) this.#checkNow();
    }, delay);
    this.#confirmTimer.unref();
  }
}

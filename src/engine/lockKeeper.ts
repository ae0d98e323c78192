import { Worker } from "node:worker_threads";
import type { Pool } from "pg";
import { type Clock, systemClock } from "../core/clock.js";
import { type Logger, toError } from "../core/logger.js";
import { type LockHolder, lockTakenReason, RENEW_LOCK_SQL } from "./sql/claim.js";
import {
  type LockRenewer,
  type LockWatcher,
  Watchdog,
  type WatchEvents,
  type WatchedLock,
} from "./watchdog.js";

export interface LockKeeperOptions {
  /** The instances' pool: its connection settings open the thread's own connections. */
  pool: Pool;
  /** The in-process renewal, for when the thread cannot run (see connectionOf). */
  renewer: LockRenewer;
  lockLifetimeMs: number;
  logger: Logger;
  clock?: Clock;
}

/** The thread's messages (src/engine/lockKeeperThread.mjs). */
type FromThread =
  | { type: "ready" }
  | { type: "stopped" }
  | { type: "renewed"; id: number; lockedAt: number }
  | {
      type: "lost";
      id: number;
      loss: { reason: string } | { found: { holder: string | null; heldAt: number | null } | null };
    }
  | { type: "retrying"; id: number; message: string }
  | { type: "unwatched"; id: number; lockedAt?: number; lost?: boolean };

/**
 * A lock held in a row of another table than the job table (a backfill slot's,
 * src/engine/backfillRunner.ts): `sql` is its fenced renewal in the shape of RENEW_LOCK_SQL (one
 * row: `renewed`, `holder`, `held_at`), with `key`'s parameters first, then the lock time held and
 * the new one; `renewer` renews it in process when the thread cannot.
 */
export interface RowLock {
  sql: string;
  key: unknown[];
  renewer: LockRenewer;
}

interface Watch {
  lock: WatchedLock;
  events: WatchEvents;
  /** Renews the lock in process if the thread dies. */
  fallback: Watchdog;
  /** Resolves the caller's stop() once the thread answered. */
  unwatched?: () => void;
  /** Set when the thread died and the in-process watchdog took the lock over. */
  fallbackStop?: () => Promise<void>;
}

/**
 * Keeps the locks of this instance's running jobs from a worker thread with its own connection
 * (src/engine/lockKeeperThread.mjs), so that a handler that keeps the main thread busy (synchronous
 * work, a long loop) does not make its instance look dead: the thread renews every third of the
 * lock lifetime whatever the main thread does. A process that is really stopped (SIGSTOP, a paused
 * VM) stops this thread too, so its locks expire and are taken over as before
 * (docs/locks-and-failover.md, "Busy is not dead").
 *
 * The run's lock time still lives in its SlotRun: each renewal is posted back and applied there,
 * and `stop()` resolves only after the thread's last word on the lock, so the final save is fenced
 * on the lock time really in the row. When the thread cannot start (a pool whose password is a
 * function cannot be handed to another thread) or dies, the in-process Watchdog renews instead.
 */
export class LockKeeper implements LockWatcher {
  readonly #options: LockKeeperOptions;
  readonly #fallback: Watchdog;
  readonly #watches = new Map<number, Watch>();
  readonly #clock: Clock;
  #worker: Worker | undefined;
  /** The thread is not used (any more): the in-process watchdog renews. */
  #inProcess = false;
  #nextId = 1;

  constructor(options: LockKeeperOptions) {
    this.#options = options;
    this.#clock = options.clock ?? systemClock;
    this.#fallback = new Watchdog({
      renewer: options.renewer,
      lockLifetimeMs: options.lockLifetimeMs,
      logger: options.logger,
      clock: this.#clock,
    });
  }

  get renewEveryMs(): number {
    return this.#fallback.renewEveryMs;
  }

  /** Whether the thread renews the locks (false: the in-process watchdog does). */
  get threaded(): boolean {
    return !this.#inProcess;
  }

  watch(lock: WatchedLock, events: WatchEvents): () => Promise<void> {
    return this.#watch(lock, events, undefined, this.#fallback);
  }

  /**
   * A watcher of a lock held in another table's row (RowLock): the same thread renews it, so a
   * backfill's busy handler keeps its slot as a live run keeps its job row.
   */
  forRow(row: RowLock): LockWatcher {
    const fallback = new Watchdog({
      renewer: row.renewer,
      lockLifetimeMs: this.#options.lockLifetimeMs,
      logger: this.#options.logger,
      clock: this.#clock,
    });
    return { watch: (lock, events) => this.#watch(lock, events, row, fallback) };
  }

  #watch(
    lock: WatchedLock,
    events: WatchEvents,
    row: RowLock | undefined,
    fallback: Watchdog,
  ): () => Promise<void> {
    const worker = this.#thread();
    if (!worker || !lock.heldLockAt) return fallback.watch(lock, events);
    const id = this.#nextId++;
    const watch: Watch = { lock, events, fallback };
    this.#watches.set(id, watch);
    worker.postMessage({
      type: "watch",
      id,
      jobId: lock.jobId,
      ...(row ? { sql: row.sql, params: row.key } : {}),
      lockedAt: lock.heldLockAt.getTime(),
      // the thread writes lock times by the system's clock, shifted to the engine's
      offsetMs: this.#clock.now() - systemClock.now(),
    });
    return () => {
      if (watch.fallbackStop) return watch.fallbackStop();
      if (!this.#watches.has(id)) return Promise.resolve();
      return new Promise<void>((resolve) => {
        watch.unwatched = resolve;
        this.#worker?.postMessage({ type: "unwatch", id });
      });
    };
  }

  /** Starts the thread ahead of the first run (it loads its database driver and connects). */
  start(): void {
    this.#thread();
  }

  /** Ends the thread (after the drain: no run holds a lock any more). */
  async close(): Promise<void> {
    const worker = this.#worker;
    this.#worker = undefined;
    if (!worker) return;
    const stopped = new Promise<void>((resolve) => {
      worker.on("message", (message: FromThread) => message.type === "stopped" && resolve());
      worker.once("exit", () => resolve());
    });
    worker.postMessage({ type: "stop" });
    await Promise.race([stopped, this.#clock.sleep(2_000)]);
    await worker.terminate();
  }

  #thread(): Worker | undefined {
    if (this.#inProcess) return undefined;
    if (this.#worker) return this.#worker;
    const connection = connectionOf(this.#options.pool);
    if (typeof connection === "string") return this.#useInProcess(connection);
    try {
      const worker = new Worker(new URL("./lockKeeperThread.mjs", import.meta.url), {
        workerData: {
          connection,
          renewSql: RENEW_LOCK_SQL,
          renewEveryMs: this.renewEveryMs,
          lockLifetimeMs: this.#options.lockLifetimeMs,
        },
        // the thread runs plain JavaScript: no loader of the main thread's (tsx) is needed
        execArgv: [],
      });
      worker.unref();
      worker.on("message", (message: FromThread) => this.#onMessage(message));
      worker.on("error", (error) => this.#onDied(worker, `failed: ${error.message}`));
      worker.on("exit", (code) => this.#onDied(worker, `exited with code ${code}`));
      this.#worker = worker;
      return worker;
    } catch (error) {
      return this.#useInProcess(`the thread could not start: ${toError(error).message}`);
    }
  }

  #onMessage(message: FromThread): void {
    if (message.type === "ready" || message.type === "stopped") return;
    const watch = this.#watches.get(message.id);
    if (!watch) return;
    switch (message.type) {
      case "renewed":
        watch.lock.renewed(new Date(message.lockedAt));
        watch.events.onRenewed?.();
        return;
      case "lost":
        watch.events.onLost(
          "reason" in message.loss ? message.loss.reason : lockTakenReason(holderOf(message.loss.found)),
        );
        return;
      case "retrying":
        this.#options.logger.warn(
          { task: watch.lock.taskName, jobId: watch.lock.jobId, err: new Error(message.message) },
          "lock renewal failed; retrying before the lock expires",
        );
        return;
      case "unwatched":
        this.#watches.delete(message.id);
        watch.unwatched?.();
        return;
    }
  }

  /** The thread ended while locks were watched (not by close()): the in-process watchdog keeps them. */
  #onDied(worker: Worker, how: string): void {
    if (this.#worker !== worker) return;
    this.#worker = undefined;
    this.#useInProcess(`the thread ${how}`);
    for (const [id, watch] of this.#watches) {
      this.#watches.delete(id);
      const stop = watch.fallback.watch(watch.lock, watch.events);
      watch.fallbackStop = stop;
      if (watch.unwatched) void stop().then(watch.unwatched);
    }
  }

  #useInProcess(why: string): undefined {
    this.#inProcess = true;
    this.#options.logger.warn(
      `lock keeper: ${why}; the main thread renews the locks of running jobs, so a handler that blocks the event loop for longer than the lock lifetime gets its slot taken over (give it isolation: "worker", docs/locks-and-failover.md)`,
    );
    return undefined;
  }
}

/** The thread's words for the holder, as the SQL's (times as numbers across the thread boundary). */
function holderOf(found: { holder: string | null; heldAt: number | null } | null): LockHolder {
  return found
    ? { holder: found.holder, heldAt: found.heldAt === null ? null : new Date(found.heldAt) }
    : undefined;
}

/** The pool's connection settings a thread can be given (structured-cloneable): or why not. */
function connectionOf(pool: Pool): Record<string, unknown> | string {
  const options = pool.options as unknown as Record<string, unknown>;
  const keys = [
    "connectionString",
    "host",
    "port",
    "user",
    "password",
    "database",
    "ssl",
    "options",
    "application_name",
    "connectionTimeoutMillis",
    "keepAlive",
    "keepAliveInitialDelayMillis",
  ];
  const connection: Record<string, unknown> = { keepAlive: true };
  for (const key of keys) {
    const value = options[key];
    if (value === undefined) continue;
    if (typeof value === "function")
      return `the pool's "${key}" is a function, which cannot be handed to the lock keeper's thread`;
    connection[key] = value;
  }
  try {
    structuredClone(connection);
  } catch {
    return "the pool's connection settings cannot be handed to the lock keeper's thread (ssl with functions?)";
  }
  return connection;
}

import type { Pool } from "pg";
import pg from "pg";
import { type Clock, type ClockTimer, systemClock } from "../core/clock.js";
import type { Logger } from "../core/logger.js";
import { SHARDS_CHANNEL } from "./shardSql.js";

/**
 * The shard workers' LISTEN session (src/sharding/shardWorker.ts): a dedicated connection opened
 * with the pool's settings (not one of its connections: a LISTEN holds its session for good, and the
 * pool's own are few, src/scheduler/settings.ts MIN_POOL_MAX). It reconnects after a drop, waiting
 * twice as long after each failure up to RECONNECT_MAX_MS; while it is down the worker polls.
 */

const RECONNECT_MAX_MS = 5_000;

export class ShardListener {
  readonly #pool: Pool;
  readonly #logger: Logger;
  readonly #clock: Clock;
  readonly #onNotify: (taskName: string) => void;
  #client: pg.Client | undefined;
  #timer: ClockTimer | undefined;
  #delayMs = 250;
  #stopped = false;

  constructor(deps: { pool: Pool; logger: Logger; clock?: Clock; onNotify: (taskName: string) => void }) {
    this.#pool = deps.pool;
    this.#logger = deps.logger;
    this.#clock = deps.clock ?? systemClock;
    this.#onNotify = deps.onNotify;
  }

  /** Whether notifications can arrive now (else the worker polls). */
  get listening(): boolean {
    return this.#client !== undefined;
  }

  async start(): Promise<void> {
    await this.#connect().catch((error: unknown) => {
      this.#logger.warn({ err: error }, "shard worker: LISTEN failed; polling until it reconnects");
      this.#reconnectLater();
    });
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    this.#clock.clearTimeout(this.#timer);
    const client = this.#client;
    this.#client = undefined;
    if (client) {
      client.removeAllListeners("end");
      await client.end().catch(() => {});
    }
  }

  async #connect(): Promise<void> {
    const client = new pg.Client({ ...this.#pool.options, keepAlive: true });
    // an error on an idle session is an 'error' event: unhandled it would end the process
    client.on("error", (error) => this.#lost(client, error));
    client.on("end", () => this.#lost(client));
    client.on("notification", (message) => {
      if (message.channel === SHARDS_CHANNEL) this.#onNotify(message.payload ?? "");
    });
    try {
      await client.connect();
      await client.query(`LISTEN ${SHARDS_CHANNEL}`);
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
    this.#delayMs = 250;
    // a notification sent while the session was down is lost: one pass finds what it announced
    this.#onNotify("");
  }

  #lost(client: pg.Client, error?: Error): void {
    if (this.#client !== client) return;
    this.#client = undefined;
    client.removeAllListeners("end");
    void client.end().catch(() => {});
    if (this.#stopped) return;
    this.#logger.warn(
      { err: error },
      "shard worker: the LISTEN session ended; reconnecting (polling meanwhile)",
    );
    this.#reconnectLater();
  }

  #reconnectLater(): void {
    if (this.#stopped || this.#timer) return;
    const delay = this.#delayMs;
    this.#delayMs = Math.min(this.#delayMs * 2, RECONNECT_MAX_MS);
    this.#timer = this.#clock.setTimeout(() => {
      this.#timer = undefined;
      this.#connect().catch(() => this.#reconnectLater());
    }, delay);
    this.#timer.unref();
  }
}

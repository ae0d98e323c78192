import { PostgresNotificationChannel } from "@agendajs/postgres-backend";
import type { PoolClient } from "pg";

/** The parent's LISTEN connection, a pooled client it keeps checked out while connected. */
interface ListenConnection {
  listenClient?: PoolClient;
  handleConnectionLoss(): void;
}

/** Another channel heard on the same LISTEN connection (the pause-all switch, src/engine/pauseGate.ts). */
export interface ExtraChannel {
  name: string;
  /** A notification on it (its payload). */
  onMessage(payload: string): void;
  /** Listening (again) after each connect: what was sent while not listening was missed. */
  onListening(): void;
}

/**
 * Agenda's PostgreSQL LISTEN/NOTIFY channel without the job-state broadcast: Agenda publishes
 * `start`, `success`/`fail` and `complete` of every run to all processes (three NOTIFY statements
 * per run) for remote event listeners; cronwarden reports runs through its own events and the run
 * log, so nobody listens. The job notifications themselves (a job saved, a run requested) are
 * kept: they make the claim loop of every instance look for due jobs (src/engine/claimLoop.ts).
 *
 * It also never leaves its LISTEN client checked out of the pool after a disconnect. The parent
 * keeps one client checked out while connected, and leaks it in two cases:
 * - a disconnect while a connect is in flight (its reconnect timer fires every 100 ms during a
 *   database outage): the connect ends after the disconnect and keeps its client;
 * - a connect whose LISTEN fails after it got its client (the database going down between the
 *   two): the client is neither released nor destroyed.
 * A client that stays checked out makes the owner's `pool.end()` wait forever, so the process
 * hung at its shutdown (test/integration/notificationChannel.test.ts).
 *
 * And it backs off between reconnects for as long as the database stays down. The parent doubles
 * its delay per attempt, but each attempt's connect() resets the count it doubles, so it retried
 * every 100 ms through an outage (each failure also made the engine probe the database), and its
 * limit of attempts, never reached, would have left the channel dead for good after a long outage.
 * Here the count of failures since the last connect doubles the delay up to
 * `reconnect.maxDelayMs`, and the channel retries until it connects or is disconnected. Without
 * it, a job notification waits for the claim loop's next poll (src/engine/claimLoop.ts).
 */
export class JobNotificationChannel extends PostgresNotificationChannel {
  /** disconnect() was called and no connect() since: a connect ending now gives its client back. */
  #closed = false;
  /** Connects that failed (or connections lost) since the last connect that succeeded. */
  #failures = 0;
  readonly #extra: ExtraChannel[] = [];
  /** The client the extra channels listen on, and the listener this channel added to it. */
  #extraListening:
    | { client: PoolClient; listener: (message: { channel: string; payload?: string }) => void }
    | undefined;

  constructor(...options: ConstructorParameters<typeof PostgresNotificationChannel>) {
    super(...options);
    // Agenda builds and sends a state notification only when the channel has `publishState`
    // (Agenda.publishJobStateNotification): without it, a run costs no notification object either
    Object.defineProperty(this, "publishState", { value: undefined });
  }

  /**
   * Called by the engine's start, and by the parent's reconnect timer; the timer never fires
   * after a disconnect (cleared by it, and by a connect in flight that fails after it).
   */
  override async connect(): Promise<void> {
    this.#closed = false;
    try {
      await super.connect();
    } catch (error) {
      this.#destroyListenClient();
      if (this.#closed) this.clearReconnect();
      throw error;
    }
    this.#failures = 0;
    if (this.#closed) await super.disconnect();
    else await this.#listenExtra();
  }

  /** Hears `channel` too, on the same connection (one LISTEN more per connect, no statement per message). */
  alsoListen(channel: ExtraChannel): void {
    this.#extra.push(channel);
  }

  async #listenExtra(): Promise<void> {
    const connection = this as unknown as ListenConnection;
    const client = connection.listenClient;
    if (!client || this.#extra.length === 0) return;
    const listener = (message: { channel: string; payload?: string }) => {
      for (const channel of this.#extra)
        if (message.channel === channel.name) channel.onMessage(message.payload ?? "");
    };
    this.#stopExtra();
    client.on("notification", listener);
    this.#extraListening = { client, listener };
    try {
      for (const channel of this.#extra) await client.query(`LISTEN "${channel.name}"`);
    } catch (error) {
      // as a connection lost: the parent reconnects, and the next connect listens again
      this.emit("error", error);
      connection.handleConnectionLoss();
      return;
    }
    for (const channel of this.#extra) channel.onListening();
  }

  /**
   * After a failed connect, or a connection lost (the parent calls it for both). Emits
   * `reconnectScheduled` with the delay.
   */
  protected override scheduleReconnect(): void {
    const { enabled, initialDelayMs, maxDelayMs } = this.config.reconnect;
    if (!enabled || this.#closed) return;
    // Node's timers, not the engine's clock (src/core/clock.ts): `reconnectTimeout` belongs to the
    // parent class (@agendajs/postgres-backend), which clears it itself with clearTimeout
    clearTimeout(this.reconnectTimeout);
    const delayMs = reconnectDelayMs(this.#failures, initialDelayMs, maxDelayMs);
    this.#failures += 1;
    this.setState("reconnecting");
    this.reconnectTimeout = setTimeout(() => {
      this.reconnectTimeout = undefined;
      // its failure was emitted as an `error` by the parent's connect (one per failed attempt)
      this.connect().catch(() => {});
    }, delayMs);
    this.emit("reconnectScheduled", delayMs);
  }

  /**
   * A pooled client goes back to the pool at a disconnect: it must not keep hearing the extra
   * channels (nor keep this channel's listener) for its next user.
   */
  #stopExtra(): Promise<unknown> | undefined {
    const listening = this.#extraListening;
    this.#extraListening = undefined;
    if (!listening) return undefined;
    listening.client.removeListener("notification", listening.listener);
    return Promise.all(
      this.#extra.map((channel) => listening.client.query(`UNLISTEN "${channel.name}"`).catch(() => {})),
    );
  }

  override async disconnect(): Promise<void> {
    this.#closed = true;
    this.#failures = 0;
    await this.#stopExtra();
    await super.disconnect();
    // the parent clears its reconnect timer before its UNLISTEN: a connection lost during that
    // statement schedules another one
    this.clearReconnect();
  }

  /** The client of a failed connect: its connection is in doubt, so it is closed, not pooled. */
  #destroyListenClient(): void {
    const connection = this as unknown as ListenConnection;
    const client = connection.listenClient;
    connection.listenClient = undefined;
    try {
      client?.release(true);
    } catch {
      // already released: nothing is checked out
    }
  }
}

/** The wait before reconnect attempt `failures + 1`: doubling from `initialMs`, at most `maxMs`. */
export function reconnectDelayMs(failures: number, initialMs: number, maxMs: number): number {
  return Math.min(initialMs * 2 ** Math.min(failures, 30), maxMs);
}

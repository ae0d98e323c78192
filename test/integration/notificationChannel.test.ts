import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { JobNotificationChannel } from "../../src/engine/notificationChannel.js";
import { createTestDatabase, type TestDatabase } from "../helpers/database.js";

/**
 * The channel's LISTEN client is back in the pool after a disconnect, however the connect ended:
 * a client left checked out makes `pool.end()` wait forever (an instance hung at its shutdown).
 */

let db: TestDatabase;

beforeAll(async () => {
  db = await createTestDatabase();
});

afterAll(async () => {
  await db?.drop();
});

const checkedOut = () => db.pool.totalCount - db.pool.idleCount;

/**
 * A channel whose LISTEN fails on every connect, on a connected client (a quote in the channel
 * name), as through a database outage; `failures()` counts its `error` events.
 */
function failingChannel(reconnect: { enabled: boolean; initialDelayMs?: number; maxDelayMs?: number }) {
  const channel = new JobNotificationChannel({ pool: db.pool, channelName: 'no"such', reconnect });
  let failures = 0;
  channel.on("error", () => {
    failures += 1;
  });
  return { channel, failures: () => failures };
}

describe("JobNotificationChannel", () => {
  it("gives its client back when a disconnect comes while it connects", async () => {
    const channel = new JobNotificationChannel({ pool: db.pool });
    channel.on("error", () => {});
    const connecting = channel.connect();
    await channel.disconnect();
    await connecting;
    expect(channel.state).toBe("disconnected");
    expect(checkedOut()).toBe(0);
  });

  it("gives its client back when LISTEN fails after the client was connected", async () => {
    const { channel } = failingChannel({ enabled: false });
    await expect(channel.connect()).rejects.toThrow(/syntax error/);
    expect(checkedOut()).toBe(0);
    await channel.disconnect();
  });

  it("stops reconnecting when disconnected while a connect that fails is in flight", async () => {
    const { channel, failures } = failingChannel({ enabled: true, initialDelayMs: 1 });
    const connecting = channel.connect().catch(() => {});
    await channel.disconnect();
    await connecting;
    const after = failures();
    // a reconnect timer left behind would fail again within a few milliseconds
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect(failures()).toBe(after);
    expect(checkedOut()).toBe(0);
  });

  it("backs off between reconnects while its connects fail, until it is disconnected", async () => {
    const { channel, failures } = failingChannel({ enabled: true, initialDelayMs: 2, maxDelayMs: 16 });
    const delays: number[] = [];
    const scheduled = new Promise<void>((resolve) => {
      channel.on("reconnectScheduled", (delayMs: number) => {
        delays.push(delayMs);
        if (delays.length === 7) resolve();
      });
    });
    await channel.connect().catch(() => {});
    await scheduled;
    await channel.disconnect();
    // Agenda's own channel reset its count at each connect: 2 ms every time
    expect(delays).toEqual([2, 4, 8, 16, 16, 16, 16]);
    // one error per failed attempt (the parent emits it before it schedules the next one)
    expect(failures()).toBe(7);
    expect(checkedOut()).toBe(0);
  });

  it("still delivers job notifications once connected", async () => {
    const channel = new JobNotificationChannel({ pool: db.pool });
    channel.on("error", () => {});
    const received: string[] = [];
    channel.subscribe((notification) => {
      received.push(notification.jobName);
    });
    await channel.connect();
    await channel.publish({
      jobId: "1" as never,
      jobName: "hello",
      nextRunAt: new Date(),
      priority: 0,
      timestamp: new Date(),
    });
    for (let waited = 0; received.length === 0 && waited < 100; waited++)
      await new Promise((resolve) => setTimeout(resolve, 50));
    expect(received).toEqual(["hello"]);
    await channel.disconnect();
    expect(checkedOut()).toBe(0);
  });
});

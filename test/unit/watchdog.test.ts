import { describe, expect, it } from "vitest";
import { type LockRenewer, Watchdog } from "../../src/engine/watchdog.js";
import { createLogger } from "../../src/index.js";
import { pollUntil } from "../helpers/poll.js";

const logger = createLogger({ level: "silent" });

/** A renewer over an in-memory "row": compare-and-set on the lock time, like the SQL. */
function fakeRow(initial: Date) {
  const row = { lockedAt: initial, failing: false, calls: 0 };
  const renewer: LockRenewer = {
    async renewLock(_jobId, expected, next) {
      row.calls++;
      if (row.failing) throw new Error("connect ECONNREFUSED 127.0.0.1:5432");
      if (row.lockedAt.getTime() !== expected.getTime())
        return { renewed: false, found: { holder: "other-instance", heldAt: row.lockedAt } };
      row.lockedAt = next;
      return { renewed: true };
    },
  };
  return { row, renewer };
}

function watch(watchdog: Watchdog, lockedAt: Date) {
  const events = { renewed: [] as Date[], lost: [] as string[] };
  const lock = {
    jobId: "job-1",
    taskName: "task",
    heldLockAt: lockedAt as Date | undefined,
    renewed(at: Date) {
      lock.heldLockAt = at;
      events.renewed.push(at);
    },
  };
  const stop = watchdog.watch(lock, { onLost: (reason) => events.lost.push(reason) });
  return { events, stop };
}

describe("Watchdog", () => {
  it("renews at a third of the lifetime, fencing each renewal on the time it wrote last", async () => {
    const start = new Date();
    const { row, renewer } = fakeRow(start);
    const watchdog = new Watchdog({ renewer, lockLifetimeMs: 300, logger });
    expect(watchdog.renewEveryMs).toBe(250); // the floor: lifetime / 3 = 100 is raised to 250
    const { events, stop } = watch(new Watchdog({ renewer, lockLifetimeMs: 900, logger }), start);
    await pollUntil("three renewals", () => events.renewed.length >= 3);
    await stop();
    expect(row.lockedAt).toEqual(events.renewed.at(-1));
    expect(events.lost).toEqual([]);
    const calls = row.calls;
    await new Promise((resolve) => setTimeout(resolve, 700));
    expect(row.calls).toBe(calls); // stopped means stopped
  });

  it("reports the lock lost when the row holds another lock time (taken over)", async () => {
    const start = new Date();
    const { row, renewer } = fakeRow(start);
    const { events, stop } = watch(new Watchdog({ renewer, lockLifetimeMs: 900, logger }), start);
    row.lockedAt = new Date(0); // another instance took it
    await pollUntil("the loss", () => events.lost.length > 0);
    expect(events.lost).toEqual([
      'the lock was taken by instance "other-instance" (its lock from 1970-01-01T00:00:00.000Z)',
    ]);
    await stop();
  });

  it("retries failed renewals, and reports the lock lost once they fail for a whole lifetime", async () => {
    const start = new Date();
    const { row, renewer } = fakeRow(start);
    const { events, stop } = watch(new Watchdog({ renewer, lockLifetimeMs: 900, logger }), start);
    await pollUntil("a renewal", () => events.renewed.length >= 1);
    row.failing = true;
    const failingSince = row.calls;
    await pollUntil("the loss", () => events.lost.length > 0, { timeoutMs: 5000 });
    expect(row.calls - failingSince).toBeGreaterThanOrEqual(3); // it retried before giving up
    expect(events.lost[0]).toMatch(/^the lock could not be renewed for 1 s: connect ECONNREFUSED/);
    await stop();
  });
});

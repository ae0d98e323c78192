import { setTimeout as sleep } from "node:timers/promises";
import { describe, expect, it } from "vitest";
import type { RunTroubleEvent } from "../../src/index.js";
import { harnessSuite, pollUntil } from "../helpers/harness.js";

/** Lock renewal, fencing and timeouts in one process against a real PostgreSQL. */

const suite = harnessSuite();
const start = suite.start;
const db = () => suite.db();

function concurrency() {
  const state = { active: 0, max: 0, runs: 0 };
  return {
    state,
    async around(work: () => Promise<void>) {
      state.active++;
      state.runs++;
      state.max = Math.max(state.max, state.active);
      try {
        await work();
      } finally {
        state.active--;
      }
    },
  };
}

describe("watchdog", () => {
  it("renews the lock of a run longer than several lock lifetimes: one run, never taken over", async () => {
    const counter = concurrency();
    const h = await start(
      [{ name: "wd-long", handler: () => counter.around(() => sleep(5000)) }],
      [{ name: "wd-long", cron: "*/30 * * * * *" }],
      { lockLifetimeMs: 1200 },
    );
    await h.runsOf("wd-long", 1, 45_000);
    expect(counter.state).toMatchObject({ max: 1, runs: 1 });
    const run = await pollUntil("the run record", async () => (await h.scheduler.runs("wd-long", 5))[0]);
    expect(run).toMatchObject({ outcome: "succeeded", rerun: false });
    expect(run?.durationMs).toBeGreaterThanOrEqual(5000);
  }, 60_000);

  it("fenced renewal: a lock stolen in SQL fires the old owner's signal and records the run lock-lost, naming the taker", async () => {
    let aborted: unknown;
    const lost: RunTroubleEvent[] = [];
    const h = await start(
      [
        {
          name: "wd-stolen",
          handler: async (context) => {
            await sleep(20_000, undefined, { signal: context.signal }).catch(() => {
              aborted = context.signal.reason;
            });
          },
        },
      ],
      [{ name: "wd-stolen", cron: "*/2 * * * * *" }],
      { lockLifetimeMs: 1500 },
    );
    h.scheduler.on("run:lock-lost", (event) => lost.push(event));
    await new Promise<void>((resolve) => h.scheduler.once("run:started", () => resolve()));
    // what another instance's takeover looks like in the row: a lock time this instance never wrote
    await db().pool.query(
      "UPDATE agenda_jobs SET locked_at = now() + interval '1 hour', last_modified_by = 'other-instance' WHERE name = 'wd-stolen'",
    );
    await pollUntil("the lock loss", () => lost.length > 0, { timeoutMs: 5000 });
    expect(lost[0]?.reason).toMatch(/^the lock was taken by instance "other-instance" \(its lock from /);
    await pollUntil("the aborted handler", () => aborted !== undefined);
    expect((aborted as Error).message).toMatch(/^lock lost: the lock was taken by instance "other-instance"/);
    const lostRun = await pollUntil("the lost run's record", async () =>
      (await h.scheduler.runs("wd-stolen", 20)).find((record) => record.outcome !== "skipped"),
    );
    expect(lostRun).toMatchObject({ outcome: "lock-lost", error: expect.stringMatching(/^lock lost: /) });
    // the fenced final save did not unlock the new owner's lock
    const { rows } = await db().pool.query(
      "SELECT locked_at > now() AS still_stolen FROM agenda_jobs WHERE name = 'wd-stolen'",
    );
    expect(rows).toEqual([{ still_stolen: true }]);
  });
});

describe("per-task timeout", () => {
  it("a handler that honours the signal: recorded as timed out, never two runs at once", async () => {
    const counter = concurrency();
    const h = await start(
      [
        {
          name: "to-honours",
          timeoutMs: 1500,
          handler: (context) =>
            counter.around(() => sleep(10_000, undefined, { signal: context.signal }).catch(() => {})),
        },
      ],
      [{ name: "to-honours", cron: "* * * * * *" }],
    );
    await h.runsOf("to-honours", 2, 20_000);
    expect(counter.state.max).toBe(1);
    // (the slots that fell due during a run are recorded skipped: overlap skip)
    const run = await pollUntil("a run record", async () =>
      (await h.scheduler.runs("to-honours", 20)).find((record) => record.outcome !== "skipped"),
    );
    expect(run).toMatchObject({ outcome: "failed", error: "timed out after 1.5 s" });
  });

  it("a handler that ignores the signal keeps its lock until it settles: never two runs at once", async () => {
    const counter = concurrency();
    const abandoned: RunTroubleEvent[] = [];
    const h = await start(
      [{ name: "to-ignores", timeoutMs: 1000, handler: () => counter.around(() => sleep(3000)) }],
      [{ name: "to-ignores", cron: "* * * * * *" }],
      { lockLifetimeMs: 1200, timeoutGraceMs: 10_000 },
    );
    h.scheduler.on("run:abandoned", (event) => abandoned.push(event));
    await h.runsOf("to-ignores", 2, 20_000);
    expect(counter.state.max).toBe(1);
    expect(abandoned).toEqual([]);
    const runs = await pollUntil("two run records", async () => {
      const records = (await h.scheduler.runs("to-ignores", 30)).filter(
        (record) => record.outcome !== "skipped",
      );
      return records.length >= 2 ? records : undefined;
    });
    for (const run of runs) {
      expect(run).toMatchObject({ outcome: "failed", error: "timed out after 1 s" });
      expect(run.durationMs).toBeGreaterThanOrEqual(3000); // recorded when the handler really ended
    }
  });

  it("past the grace, a handler that ignores the signal is abandoned with an event", async () => {
    const abandoned: RunTroubleEvent[] = [];
    const h = await start(
      [{ name: "to-abandoned", timeoutMs: 1000, handler: () => sleep(4000) }],
      [{ name: "to-abandoned", cron: "*/10 * * * * *" }],
      { timeoutGraceMs: 500 },
    );
    h.scheduler.on("run:abandoned", (event) => abandoned.push(event));
    await pollUntil("the abandonment", () => abandoned.length > 0, { timeoutMs: 20_000 });
    expect(abandoned[0]?.reason).toMatch(/^timed out after 1 s and ignored its abort signal for 0.5 s more/);
    const failed = await pollUntil("the record", async () => (await h.scheduler.runs("to-abandoned", 1))[0]);
    expect(failed).toMatchObject({
      outcome: "failed",
      error: expect.stringMatching(/^timed out after 1 s and ignored/),
    });
  });
});

import { expect, it } from "vitest";
import type { RunRecord } from "../../src/index.js";
import { harnessSuite, pollUntil } from "../helpers/harness.js";

/**
 * Lifting pause-all applies each task's catchUp exactly as after a re-enable (docs/operations.md,
 * "Pause all"; docs/behaviour.md, "Catch-up"), against a real PostgreSQL: a pause longer than the
 * missed-slot grace (1 s here) leaves `none` to record every missed slot skipped, `latest` to run
 * the newest one, and `all` to run each one in its window, oldest first. The pause's length is
 * counted by the database's clock from the switch's recorded time, not slept.
 */

const suite = harnessSuite();
const PERIOD = 2_000;
const CRON = "*/2 * * * * *";

it("a pause longer than the grace, lifted: runs none records the missed slots skipped, latest runs the newest, all runs each oldest first", async () => {
  const tasks = ["pc-none", "pc-latest", "pc-all"];
  const harness = await suite.start(
    tasks.map((name) => ({ name, handler: async () => {} })),
    [
      { name: "pc-none", cron: CRON, catchUp: { runs: "none", window: "1h" } },
      { name: "pc-latest", cron: CRON, catchUp: { runs: "latest", window: "1h" } },
      { name: "pc-all", cron: CRON, catchUp: { runs: "all", window: "1h" } },
    ],
    { missedSlotGraceMs: 1_000 },
  );
  await pollUntil("a run of each task", async () => {
    for (const name of tasks)
      if (!(await harness.scheduler.runs(name, 5)).some((run) => run.outcome === "succeeded")) return false;
    return true;
  });
  const caller = { requestedBy: "ops", via: "test", reason: "incident" };
  expect(await harness.scheduler.fleet.pauseAll(caller)).toMatchObject({ changed: true });
  // five periods and more by the database's clock since the switch's recorded time
  await pollUntil(
    "five periods past the switch",
    async () =>
      (
        await suite
          .db()
          .pool.query(
            "SELECT 1 FROM cronwarden_pause WHERE clock_timestamp() > paused_at + interval '11 seconds'",
          )
      ).rows.length === 1,
    { timeoutMs: 30_000, intervalMs: 200 },
  );
  // the last slot each task recorded before the pause took effect, and its stored next slot
  const stored = new Map<string, number>();
  for (const name of tasks) {
    const { rows } = await suite
      .db()
      .pool.query<{ next: Date }>("SELECT next_run_at AS next FROM agenda_jobs WHERE name = $1", [name]);
    stored.set(name, (rows[0] as { next: Date }).next.getTime());
  }
  const { rows: clock } = await suite.db().pool.query<{ now: Date }>("SELECT clock_timestamp() AS now");
  const liftedAt = (clock[0] as { now: Date }).now.getTime();
  expect(await harness.scheduler.fleet.resumeAll(caller)).toMatchObject({ changed: true });

  // every slot from the stored one to the lift, and two ordinary runs after it, have their record
  const settled = async (name: string, runsAfterLift: number) =>
    pollUntil(`${name}: its catch-up settled`, async () => {
      const from = stored.get(name) as number;
      const rows = (await harness.scheduler.runs(name, 200))
        .filter((run) => run.scheduledAt.getTime() >= from)
        .sort((a, b) => a.scheduledAt.getTime() - b.scheduledAt.getTime());
      const missed = rows.filter((run) => run.scheduledAt.getTime() <= liftedAt);
      const later = rows.filter((run) => run.scheduledAt.getTime() > liftedAt && run.outcome === "succeeded");
      const expected = Math.floor((liftedAt - from) / PERIOD) + 1;
      return missed.length >= expected && later.length >= runsAfterLift ? { missed, later } : undefined;
    });
  const contiguous = (runs: RunRecord[], from: number) => {
    for (const [index, run] of runs.entries()) expect(run.scheduledAt.getTime()).toBe(from + index * PERIOD);
  };

  const none = await settled("pc-none", 1);
  contiguous(none.missed, stored.get("pc-none") as number);
  // the newest runs only if it is still within the grace when claimed (a slot just before the lift)
  const noneSkipped = none.missed.at(-1)?.outcome === "succeeded" ? none.missed.slice(0, -1) : none.missed;
  expect(noneSkipped.length).toBeGreaterThanOrEqual(5);
  expect(
    noneSkipped.every((run) => run.outcome === "skipped" && /catchUp.runs is none/.test(run.detail ?? "")),
  ).toBe(true);

  const latest = await settled("pc-latest", 1);
  contiguous(latest.missed, stored.get("pc-latest") as number);
  const newest = latest.missed.at(-1);
  expect(newest?.outcome).toBe("succeeded");
  expect(newest?.trigger).toBe("schedule");
  const older = latest.missed.slice(0, -1);
  expect(older.length).toBeGreaterThanOrEqual(4);
  expect(
    older.every(
      (run) => run.outcome === "skipped" && /only the newest missed slot runs/.test(run.detail ?? ""),
    ),
  ).toBe(true);

  const all = await settled("pc-all", 1);
  contiguous(all.missed, stored.get("pc-all") as number);
  expect(all.missed.length).toBeGreaterThanOrEqual(5);
  expect(all.missed.every((run) => run.outcome === "succeeded")).toBe(true);
  // one after the other, oldest first
  for (let index = 1; index < all.missed.length; index++)
    expect(all.missed[index]?.startedAt?.getTime() ?? 0).toBeGreaterThanOrEqual(
      all.missed[index - 1]?.finishedAt.getTime() ?? 0,
    );
});

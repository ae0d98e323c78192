import { expect, it } from "vitest";
import type { RunRecord } from "../../src/index.js";
import { harnessSuite, pollUntil, SchedulerHarness } from "../helpers/harness.js";

/** `every:` interval schedules against a real PostgreSQL (docs/behaviour.md, "Intervals"). */

const suite = harnessSuite();
const db = () => suite.db();
const settings = { missedSlotGraceMs: 1_000 };

async function succeeded(harness: SchedulerHarness, name: string, count: number): Promise<RunRecord[]> {
  return pollUntil(`${count} runs of ${name}`, async () => {
    const runs = (await harness.scheduler.runs(name, 100))
      .filter((run) => run.outcome === "succeeded")
      .sort((a, b) => a.scheduledAt.getTime() - b.scheduledAt.getTime());
    return runs.length >= count && runs;
  });
}

it("every: 2s runs on the epoch grid, is stored as Agenda's human interval, and keeps its grid across a restart", async () => {
  const name = "every-grid";
  const first = await suite.start([{ name, handler: async () => {} }], [{ name, every: "2s" }], settings);
  const { rows } = await db().pool.query<{ repeat_interval: string }>(
    "SELECT repeat_interval FROM agenda_jobs WHERE name = $1",
    [name],
  );
  expect(rows[0]?.repeat_interval).toBe("2 seconds");
  const before = await succeeded(first, name, 2);
  for (const run of before) expect(run.scheduledAt.getTime() % 2_000).toBe(0);
  expect((before[1]?.scheduledAt.getTime() ?? 0) - (before[0]?.scheduledAt.getTime() ?? 0)).toBe(2_000);
  const status = (await first.scheduler.status()).find((task) => task.name === name);
  expect(status?.configured).toMatchObject({ cron: "2 seconds", every: "2s" });
  await first.stop();

  const second = SchedulerHarness.create(db().pool, [{ name, handler: async () => {} }], settings);
  suite.track(second);
  await second.writeRaw(`tasks:\n  - { name: ${name}, enabled: true, every: 2s }\n`);
  await second.scheduler.start();
  const after = await succeeded(second, name, before.length + 2);
  for (const run of after) expect(run.scheduledAt.getTime() % 2_000).toBe(0);
});

it("every: follows catchUp after downtime (runs: latest)", async () => {
  const name = "every-catch-up";
  const entry = { name, every: "2s", catchUp: { runs: "latest", window: "1h" } };
  const first = await suite.start([{ name, handler: async () => {} }], [entry], settings);
  await first.stop();
  const stored = new Date(Math.floor(Date.now() / 2_000) * 2_000 - 10_000);
  await db().pool.query("UPDATE agenda_jobs SET next_run_at = $1, locked_at = NULL WHERE name = $2", [
    stored,
    name,
  ]);
  const second = SchedulerHarness.create(db().pool, [{ name, handler: async () => {} }], settings);
  suite.track(second);
  await second.writeRaw(
    `tasks:\n  - { name: ${name}, enabled: true, every: 2s, catchUp: { runs: latest, window: 1h } }\n`,
  );
  await second.scheduler.start();
  const records = await pollUntil("the catch-up run", async () => {
    const runs = (await second.scheduler.runs(name, 100))
      .filter((run) => run.scheduledAt >= stored)
      .sort((a, b) => a.scheduledAt.getTime() - b.scheduledAt.getTime());
    const first = runs.find((run) => run.outcome === "succeeded");
    if (!first) return false;
    // the skipped rows and the run's row are written independently: wait for all of them
    const skippedBefore = runs.filter(
      (run) => run.outcome === "skipped" && run.scheduledAt < first.scheduledAt,
    );
    return skippedBefore.length === (first.scheduledAt.getTime() - stored.getTime()) / 2_000 && runs;
  });
  const skipped = records.filter((run) => run.outcome === "skipped");
  expect(skipped.length).toBeGreaterThanOrEqual(5);
  skipped.forEach((run, index) => {
    expect(run.scheduledAt.getTime()).toBe(stored.getTime() + index * 2_000);
  });
  const caughtUp = records.find((run) => run.outcome === "succeeded");
  expect(caughtUp?.scheduledAt.getTime()).toBe(stored.getTime() + skipped.length * 2_000);
});

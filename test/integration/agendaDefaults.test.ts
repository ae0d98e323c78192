import { expect, it } from "vitest";
import type { RunFinishedEvent } from "../../src/index.js";
import { harnessSuite, SchedulerHarness } from "../helpers/harness.js";

/**
 * Overlap, and a slot late by less than the catch-up grace (after a short downtime or a re-enable),
 * follow Agenda's defaults. These tests pin them (docs/behaviour.md); slots late by more than the
 * grace follow the task's catchUp policy (test/integration/catchUp.test.ts).
 */

const suite = harnessSuite();
const db = () => suite.db();

function collect(harness: SchedulerHarness, taskName: string): RunFinishedEvent[] {
  const runs: RunFinishedEvent[] = [];
  harness.scheduler.on("run:finished", (event) => {
    if (event.taskName === taskName) runs.push(event);
  });
  return runs;
}

it("late within the catch-up grace: 20 s with no worker ran give one run at start, then the schedule resumes (no backfill)", async () => {
  const first = await SchedulerHarness.start(
    db().pool,
    [{ name: "catch-up", handler: async () => {} }],
    [{ name: "catch-up", cron: "*/2 * * * * *" }],
  );
  await first.stop();
  // as if every worker had been down for 20 s: ten slots missed
  const missedSince = new Date(Math.floor(Date.now() / 2000) * 2000 - 20_000);
  await db().pool.query("UPDATE agenda_jobs SET next_run_at = $1 WHERE name = 'catch-up'", [missedSince]);

  const restartedAt = Date.now();
  const second = await SchedulerHarness.start(
    db().pool,
    [{ name: "catch-up", handler: async () => {} }],
    [{ name: "catch-up", cron: "*/2 * * * * *" }],
  );
  suite.track(second);
  const runs = collect(second, "catch-up");
  await second.runsOf("catch-up", 3);
  const [catchUp, next, after] = runs;
  expect(catchUp?.scheduledAt.getTime()).toBe(missedSince.getTime());
  expect(next?.scheduledAt.getTime()).toBeGreaterThanOrEqual(restartedAt);
  expect((after?.scheduledAt.getTime() ?? 0) - (next?.scheduledAt.getTime() ?? 0)).toBe(2000);
});

it("re-enable within the catch-up grace: a job disabled over a few slots runs once at once for its frozen slot, then on schedule", async () => {
  const harness = await SchedulerHarness.start(
    db().pool,
    [{ name: "re-enable", handler: async () => {} }],
    [{ name: "re-enable", cron: "*/2 * * * * *", enabled: false }],
  );
  suite.track(harness);
  const frozen = new Date(Math.floor(Date.now() / 2000) * 2000 - 10_000);
  await db().pool.query("UPDATE agenda_jobs SET next_run_at = $1 WHERE name = 're-enable'", [frozen]);
  const runs = collect(harness, "re-enable");
  await harness.writeConfig([{ name: "re-enable", cron: "*/2 * * * * *", enabled: true }]);
  await harness.runsOf("re-enable", 2);
  expect(runs[0]?.scheduledAt.getTime()).toBe(frozen.getTime());
  expect(runs[1]?.scheduledAt.getTime()).toBeGreaterThan(Date.now() - 4000);
});

it("overlap queueOne (Agenda's own behaviour): a run that outlasts its interval never overlaps itself; the slots it spans collapse into one late run", async () => {
  let active = 0;
  let maxActive = 0;
  const harness = await SchedulerHarness.start(
    db().pool,
    [
      {
        name: "overlap",
        handler: async () => {
          active++;
          maxActive = Math.max(maxActive, active);
          await new Promise((resolve) => setTimeout(resolve, 2500));
          active--;
        },
      },
    ],
    [{ name: "overlap", cron: "* * * * * *", overlap: "queueOne" }],
  );
  suite.track(harness);
  const runs = collect(harness, "overlap");
  await harness.runsOf("overlap", 3, 30_000);
  expect(maxActive).toBe(1);
  const [a, b] = runs;
  if (!a || !b) throw new Error("expected two runs");
  // the next slot is computed when a run starts (the next second), so it is already late when the
  // run ends: it starts at once, and the slots in between are skipped
  expect(b.scheduledAt.getTime()).toBe(Math.floor(a.startedAt.getTime() / 1000) * 1000 + 1000);
  expect(b.startedAt.getTime()).toBeGreaterThanOrEqual(a.startedAt.getTime() + 2500);
  expect(b.startedAt.getTime() - b.scheduledAt.getTime()).toBeGreaterThan(1000);
});

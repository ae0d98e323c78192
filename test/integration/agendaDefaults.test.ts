import { expect, it } from "vitest";
import type { RunFinishedEvent } from "../../src/index.js";
import { harnessSuite, pollUntil, SchedulerHarness } from "../helpers/harness.js";

/**
 * A slot late by less than the catch-up grace (after a short downtime or a re-enable) runs, as
 * Agenda would run it; the past slots after it are recorded skipped. queueOne runs one late slot
 * after a long run, as Agenda does, but the newest. These tests pin them (docs/behaviour.md); slots
 * late by more than the grace follow the task's catchUp policy (test/integration/catchUp.test.ts).
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
  // (and no run since: the first start may have run one just now)
  await db().pool.query(
    `UPDATE agenda_jobs SET next_run_at = $1, last_run_at = NULL, last_finished_at = NULL, data = data - 'run'
      WHERE name = 'catch-up'`,
    [missedSince],
  );

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
  // no backfill, and no slot without a record: the past slots between the two runs are recorded skipped
  const between = ((next?.scheduledAt.getTime() ?? 0) - missedSince.getTime()) / 2000 - 1;
  await pollUntil("a skipped record of each slot between the late run and the next", async () => {
    const skipped = (await second.scheduler.runs("catch-up", 50)).filter(
      (run) =>
        run.outcome === "skipped" &&
        run.scheduledAt > missedSince &&
        run.scheduledAt.getTime() < (next?.scheduledAt.getTime() ?? 0),
    );
    return (
      skipped.length === between &&
      skipped.every((run) => /within the missed-slot grace/.test(run.detail ?? ""))
    );
  });
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

it("overlap queueOne: a run that outlasts its interval never overlaps itself; the slots it spans collapse into one late run, of the newest of them", async () => {
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
  // the queued run is the newest slot due when a ended (Agenda's own would be the first, an older
  // slot run after newer ones were recorded skipped); it starts at once, after a
  const aEnded = a.startedAt.getTime() + a.durationMs;
  expect(b.scheduledAt.getTime()).toBeGreaterThanOrEqual(Math.floor(aEnded / 1000) * 1000);
  expect(b.scheduledAt.getTime()).toBeLessThanOrEqual(b.startedAt.getTime());
  expect(b.startedAt.getTime()).toBeGreaterThanOrEqual(aEnded);
  // the older slots a spanned are each recorded skipped (written apart from the runs' rows: waited for)
  const spanned = (b.scheduledAt.getTime() - a.scheduledAt.getTime()) / 1000 - 1;
  expect(spanned).toBeGreaterThanOrEqual(1); // a 2.5 s run spans at least two slots: the newest runs
  const skipped = await pollUntil("a record of each slot a spanned", async () => {
    const found = (await harness.scheduler.runs("overlap", 50)).filter(
      (run) =>
        run.outcome === "skipped" && run.scheduledAt > a.scheduledAt && run.scheduledAt < b.scheduledAt,
    );
    return found.length === spanned && found;
  });
  for (const run of skipped) expect(run.detail).toMatch(/only the newest of them runs, after it/);
});

import { setTimeout as sleep } from "node:timers/promises";
import { expect, it } from "vitest";
import type { RunRecord } from "../../src/index.js";
import { harnessSuite, pollUntil, type SchedulerHarness } from "../helpers/harness.js";

/** Overlap policies against a real PostgreSQL (docs/behaviour.md, "Overlap"). */

const suite = harnessSuite();

function longTask(name: string, ms: number, counter: { active: number; max: number }, honourSignal = false) {
  return {
    name,
    handler: async ({ signal }: { signal: AbortSignal }) => {
      counter.active++;
      counter.max = Math.max(counter.max, counter.active);
      try {
        await sleep(ms, undefined, honourSignal ? { signal } : {});
      } finally {
        counter.active--;
      }
    },
  };
}

async function records(harness: SchedulerHarness, name: string, count: (runs: RunRecord[]) => boolean) {
  return pollUntil(
    `runs of ${name}`,
    async () => {
      const runs = (await harness.scheduler.runs(name, 100)).sort(
        (a, b) => a.scheduledAt.getTime() - b.scheduledAt.getTime(),
      );
      return count(runs) && runs;
    },
    { timeoutMs: 30_000 },
  );
}

it("skip (default): slots that fall due during a long run are recorded skipped; the next run is the first slot after it", async () => {
  const counter = { active: 0, max: 0 };
  const name = "ov-skip";
  const harness = await suite.start([longTask(name, 2_500, counter)], [{ name, cron: "* * * * * *" }]);
  // the skipped rows and the runs' rows are written independently: wait until the slots between
  // the first two runs all have a record
  const between = (all: RunRecord[], a: RunRecord, b: RunRecord) =>
    all.filter(
      (run) =>
        run.outcome === "skipped" && run.scheduledAt > a.scheduledAt && run.scheduledAt < b.scheduledAt,
    );
  const runs = await records(harness, name, (all) => {
    const [a, b] = all.filter((run) => run.outcome === "succeeded");
    return (
      a !== undefined &&
      b !== undefined &&
      between(all, a, b).length === (b.scheduledAt.getTime() - a.scheduledAt.getTime()) / 1_000 - 1
    );
  });
  const [a, b] = runs.filter((run) => run.outcome === "succeeded") as [RunRecord, RunRecord];
  const during = runs.filter(
    (run) => run.outcome === "skipped" && run.scheduledAt > a.scheduledAt && run.scheduledAt < b.scheduledAt,
  );
  // every slot between the two runs is recorded skipped, and b's slot is after a ended
  expect(during.map((run) => run.scheduledAt.getTime())).toEqual(
    Array.from(
      { length: (b.scheduledAt.getTime() - a.scheduledAt.getTime()) / 1_000 - 1 },
      (_, i) => a.scheduledAt.getTime() + (i + 1) * 1_000,
    ),
  );
  expect(during.length).toBeGreaterThanOrEqual(2);
  expect(during[0]?.detail).toMatch(/overlap is skip/);
  expect(b.scheduledAt.getTime()).toBeGreaterThan(a.finishedAt.getTime());
  expect(counter.max).toBe(1);
});

it("cancelRunning: the running handler's signal fires when the next slot comes due; that slot starts once it settles", async () => {
  const counter = { active: 0, max: 0 };
  const name = "ov-cancel";
  const harness = await suite.start(
    [longTask(name, 10_000, counter, true)],
    [{ name, cron: "*/2 * * * * *", overlap: "cancelRunning" }],
  );
  const runs = await records(
    harness,
    name,
    (all) => all.filter((run) => run.outcome === "interrupted").length >= 2,
  );
  const [a, b] = runs.filter((run) => run.outcome === "interrupted") as [RunRecord, RunRecord];
  expect(a.detail).toMatch(/cancelled when the next slot came due \(overlap: cancelRunning\)/);
  // cut at the next slot, which ran next, after the cut run had settled
  expect(b.scheduledAt.getTime()).toBe(a.scheduledAt.getTime() + 2_000);
  expect(a.finishedAt.getTime()).toBeGreaterThanOrEqual(b.scheduledAt.getTime());
  expect(b.startedAt?.getTime() ?? 0).toBeGreaterThanOrEqual(a.finishedAt.getTime());
  expect(counter.max).toBe(1);
});

it("a run that waited for a worker is not the previous run still going: at the default overlap, every slot runs, none is skipped", async () => {
  // three tasks every 2 s that run 1.2 s, on two workers: each slot one of them waits for a worker
  // and ends after its next slot; over 2 s the two workers have room for all three (3.6 s of 4 s)
  const names = ["ov-wait-a", "ov-wait-b", "ov-wait-c"];
  const counter = { active: 0, max: 0 };
  const harness = await suite.start(
    names.map((name) => longTask(name, 1_200, counter)),
    names.map((name) => ({ name, cron: "*/2 * * * * *" })),
    { maxConcurrency: 2 },
  );
  const all = await pollUntil(
    "six runs of each task",
    async () => {
      const found = await Promise.all(names.map((name) => harness.scheduler.runs(name, 100)));
      return found.every((runs) => runs.filter((run) => run.outcome === "succeeded").length >= 6) && found;
    },
    { timeoutMs: 40_000 },
  );
  const ran = all.map((runs) => runs.filter((run) => run.outcome === "succeeded"));
  const slotsOf = (runs: RunRecord[]) => runs.map((run) => run.scheduledAt.getTime()).sort((a, b) => a - b);
  // the window every task was running in: from the latest first slot to the earliest last one
  const from = Math.max(...ran.map((runs) => slotsOf(runs)[0] as number));
  const to = Math.min(...ran.map((runs) => slotsOf(runs).at(-1) as number));
  expect(to - from).toBeGreaterThanOrEqual(6_000);
  const expected = Array.from({ length: (to - from) / 2_000 + 1 }, (_, i) => from + i * 2_000);
  for (const [index, runs] of all.entries()) {
    const inWindow = (run: RunRecord) => run.scheduledAt.getTime() >= from && run.scheduledAt.getTime() <= to;
    expect(
      runs.filter((run) => run.outcome === "skipped" && inWindow(run)),
      names[index],
    ).toEqual([]);
    expect(slotsOf(runs.filter((run) => run.outcome === "succeeded" && inWindow(run))), names[index]).toEqual(
      expected,
    );
  }
  // some runs did wait for a worker: started a whole run late, they ended after their next slot
  const late = ran
    .flat()
    .filter((run) => (run.startedAt?.getTime() ?? 0) - run.scheduledAt.getTime() >= 1_000);
  expect(late.length).toBeGreaterThanOrEqual(1);
  expect(counter.max).toBeLessThanOrEqual(2);
});

import { expect, it } from "vitest";
import { jitterOffset } from "../../src/core/policies/jitter.js";
import type { RunRecord } from "../../src/index.js";
import { harnessSuite, pollUntil } from "../helpers/harness.js";

/** Jitter against a real PostgreSQL (docs/behaviour.md, "Jitter"). */

const suite = harnessSuite();
const db = () => suite.db();
const JITTER_MS = 1_500;

it("a herd on one cron starts at each task's own stable offset; the record keeps the slot", async () => {
  const names = ["herd-a", "herd-b", "herd-c", "herd-d"];
  const harness = await suite.start(
    names.map((name) => ({ name, handler: async () => {} })),
    names.map((name) => ({ name, cron: "*/2 * * * * *", jitter: "1500ms" })),
  );
  const runs = await pollUntil("two runs of every task", async () => {
    const all = await Promise.all(names.map((name) => harness.scheduler.runs(name, 20)));
    return all.every((list) => list.filter((run) => run.outcome === "succeeded").length >= 2) && all.flat();
  });
  // the first run after creation may still be unjittered (its next run was written before the jitter)
  const jittered = runs.filter((run: RunRecord) => run.outcome === "succeeded" && run.attempt === 1);
  let checked = 0;
  for (const run of jittered) {
    expect(run.scheduledAt.getTime() % 2_000).toBe(0); // the slot, on the cron's grid
    const offset = jitterOffset(run.taskName, run.scheduledAt.getTime(), JITTER_MS);
    const started = run.startedAt?.getTime() ?? 0;
    if (started - run.scheduledAt.getTime() >= offset) checked += 1;
  }
  // every run started no earlier than its slot plus its offset, except at most one per task (see above)
  expect(checked).toBeGreaterThanOrEqual(jittered.length - names.length);
  // the next run in the row is the next slot plus that slot's offset
  const { rows } = await db().pool.query<{ name: string; next_run_at: Date; locked_at: Date | null }>(
    "SELECT name, next_run_at, locked_at FROM agenda_jobs WHERE name = ANY($1)",
    [names],
  );
  for (const row of rows) {
    const slot = Math.floor(row.next_run_at.getTime() / 2_000) * 2_000;
    expect(row.next_run_at.getTime()).toBe(slot + jitterOffset(row.name, slot, JITTER_MS));
  }
  const offsets = new Set(rows.map((row) => row.next_run_at.getTime() % 2_000));
  expect(offsets.size).toBeGreaterThan(1);
});

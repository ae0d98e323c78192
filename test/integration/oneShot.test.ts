import { expect, it } from "vitest";
import { harnessSuite, pollUntil, SchedulerHarness } from "../helpers/harness.js";

/** `at:` one-shots against a real PostgreSQL (docs/behaviour.md, "One-shots"). */

const suite = harnessSuite();
const db = () => suite.db();
const settings = { missedSlotGraceMs: 1_000, missedSlotCheckMs: 0 };

function oneShotYaml(name: string, at: Date): string {
  return `tasks:\n  - { name: ${name}, enabled: true, at: "${at.toISOString()}" }\n`;
}

it("runs once across two instances, then shows as completed; a new time re-arms it", async () => {
  const name = "one-shot";
  let runs = 0;
  const task = { name, handler: async () => void runs++ };
  const at = new Date(Math.ceil(Date.now() / 1000) * 1000 + 5_000);
  const instances = [
    SchedulerHarness.create(db().pool, [task], settings),
    SchedulerHarness.create(db().pool, [task], settings),
  ];
  for (const harness of instances) {
    suite.track(harness);
    await harness.writeRaw(oneShotYaml(name, at));
    await harness.scheduler.start();
  }
  const [first] = instances as [SchedulerHarness, SchedulerHarness];
  const { rows } = await db().pool.query<{ repeat_interval: string | null; next_run_at: Date }>(
    "SELECT repeat_interval, next_run_at FROM agenda_jobs WHERE name = $1",
    [name],
  );
  expect(rows[0]).toEqual({ repeat_interval: null, next_run_at: at });

  const status = await pollUntil("the one-shot to complete", async () => {
    const found = (await first.scheduler.status()).find((entry) => entry.name === name);
    // the run's outcome row and the row's end are written independently: wait for both
    return found?.job?.completed === true && found.lastOutcome === "succeeded" && found;
  });
  expect(status).toMatchObject({
    configured: { cron: `at ${at.toISOString()}`, at: at.toISOString() },
    job: { enabled: true, nextRunAt: null, completed: true },
    lastOutcome: "succeeded",
  });
  const records = await first.scheduler.runs(name);
  expect(records.map((run) => [run.outcome, run.scheduledAt.getTime()])).toEqual([
    ["succeeded", at.getTime()],
  ]);
  // completed, not missed or lost: the silent-stop check has nothing to say
  expect((await first.scheduler.checkMissedSlots()).filter((slot) => slot.taskName === name)).toEqual([]);
  expect(runs).toBe(1);

  // a new time re-arms it: once more
  const later = new Date(Math.ceil(Date.now() / 1000) * 1000 + 3_000);
  const reconciled = first.nextReconcile();
  await first.writeRaw(oneShotYaml(name, later));
  await reconciled;
  await pollUntil("the re-armed run", async () => {
    const found = await first.scheduler.runs(name);
    return found.some((run) => run.scheduledAt.getTime() === later.getTime() && run.outcome === "succeeded");
  });
  expect(runs).toBe(2);
});

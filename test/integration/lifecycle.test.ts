import { afterAll, beforeAll, expect, it } from "vitest";
import { createTestDatabase, type TestDatabase } from "../helpers/database.js";
import { pollUntil, SchedulerHarness } from "../helpers/harness.js";

/** stop() is one lifecycle: every caller awaits the same drain, and a stop during start stops what started. */

let db: TestDatabase;

beforeAll(async () => {
  db = await createTestDatabase();
});

afterAll(async () => {
  await db?.drop();
});

it("a second stop() awaits the same drain: neither resolves before the running handler has finished", async () => {
  let release: () => void = () => {};
  let finished = false;
  const harness = await SchedulerHarness.start(
    db.pool,
    [
      {
        name: "lc-hold",
        handler: () =>
          new Promise<void>((resolve) => {
            release = () => {
              finished = true;
              resolve();
            };
          }),
      },
    ],
    [{ name: "lc-hold", cron: "* * * * * *" }],
  );
  await pollUntil("the run", async () => (await harness.scheduler.taskStatus("lc-hold"))?.running === true);
  const first = harness.scheduler.stop();
  const second = harness.scheduler.stop();
  const settled: string[] = [];
  void first.then(() => settled.push(`first after the handler: ${finished}`));
  void second.then(() => settled.push(`second after the handler: ${finished}`));
  await pollUntil("both stops waiting on the drain", async () => {
    const { rows } = await db.pool.query("SELECT locked_at FROM agenda_jobs WHERE name = 'lc-hold'");
    return rows[0]?.locked_at !== null;
  });
  expect(settled).toEqual([]);
  release();
  const [a, b] = await Promise.all([first, second]);
  expect(a).toBe(b);
  expect(a.completed).toBe(1);
  expect(settled.sort()).toEqual(["first after the handler: true", "second after the handler: true"]);
  await harness.stop();
});

it("stop() called during start() waits for the start, then stops the workers it started", async () => {
  const harness = SchedulerHarness.create(db.pool, [{ name: "lc-quick", handler: async () => {} }]);
  await harness.writeRaw('tasks:\n  - name: lc-quick\n    enabled: true\n    cron: "* * * * * *"\n');
  const starting = harness.scheduler.start();
  const stopping = harness.scheduler.stop();
  await starting;
  await stopping;
  expect(await harness.scheduler.readiness()).toMatchObject({ workersStarted: false });
  // and it stays stopped: a later stop() is the same, already settled
  expect(await harness.scheduler.stop()).toBe(await stopping);
  await harness.stop();
});

it("a run cut off at the drain deadline finishes as interrupted, not failed and not final, and its row is handed off due now", async () => {
  const finished: Array<{ outcome: string; final: boolean }> = [];
  const harness = await SchedulerHarness.start(
    db.pool,
    [
      {
        name: "lc-cut",
        handler: (context) =>
          new Promise<void>((_, reject) =>
            context.signal.addEventListener("abort", () => reject(context.signal.reason), { once: true }),
          ),
      },
    ],
    [{ name: "lc-cut", cron: "0 0 1 1 *" }],
  );
  harness.scheduler.on("run:finished", (event) =>
    finished.push({ outcome: event.outcome, final: event.final }),
  );
  await db.pool.query("UPDATE agenda_jobs SET next_run_at = now() WHERE name = 'lc-cut'");
  await pollUntil("the run", async () => (await harness.scheduler.taskStatus("lc-cut"))?.running === true);
  const result = await harness.scheduler.stop({ drainTimeoutMs: 100 });
  expect(result.handedOff).toEqual(["lc-cut"]);
  expect(finished).toEqual([{ outcome: "interrupted", final: false }]);
  const { rows } = await db.pool.query(
    "SELECT locked_at, next_run_at <= now() AS due FROM agenda_jobs WHERE name = 'lc-cut'",
  );
  expect(rows[0]).toEqual({ locked_at: null, due: true });
  await harness.stop();
});

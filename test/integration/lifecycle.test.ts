import pg from "pg";
import { afterAll, beforeAll, expect, it } from "vitest";
import type { Scheduler } from "../../src/index.js";
import { createTestDatabase, type TestDatabase } from "../helpers/database.js";
import { pollUntil, SchedulerHarness } from "../helpers/harness.js";

/**
 * stop() is one lifecycle: every caller awaits the same drain, a stop during start stops what
 * started and leaves nothing running, and a retention prune in flight is awaited.
 */

let db: TestDatabase;

beforeAll(async () => {
  db = await createTestDatabase();
});

afterAll(async () => {
  await db?.drop();
});

it("a second stop() awaits the same drain: neither resolves before the running handler has finished", async () => {
  let release: (() => void) | undefined;
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
  // the handler itself: the status says running from the start save on, which comes a little
  // before the slot (docs/design.md, "The start-ahead")
  await pollUntil("the handler", () => release !== undefined);
  expect((await harness.scheduler.taskStatus("lc-hold"))?.running).toBe(true);
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
  release?.();
  const [a, b] = await Promise.all([first, second]);
  expect(a).toBe(b);
  expect(a.completed).toBe(1);
  expect(settled.sort()).toEqual(["first after the handler: true", "second after the handler: true"]);
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

/** Every period of a scheduler's timers short, so that one left running shows within a second. */
const BUSY_TIMERS = {
  processEveryMs: 100,
  healthProbeMs: 100,
  livenessCheckMs: 100,
  missedSlotCheckMs: 100,
  antiEntropyMs: 100,
};

/** A pool of its own, whose sessions (and the liveness session, opened with its options) carry `name`. */
function namedPool(name: string): pg.Pool {
  const pool = new pg.Pool({ connectionString: db.url, max: 5, application_name: name });
  pool.on("error", () => {});
  return pool;
}

async function sessionsNamed(name: string): Promise<number> {
  const { rows } = await db.pool.query<{ n: number }>(
    "SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = $1",
    [name],
  );
  return rows[0]?.n ?? 0;
}

async function registered(instanceId: string): Promise<boolean> {
  const { rows } = await db.pool.query("SELECT 1 FROM cronwarden_instances WHERE instance_id = $1", [
    instanceId,
  ]);
  return rows.length > 0;
}

/**
 * A stopped scheduler is quiet: its pool has no client checked out (no LISTEN, no transaction, no
 * poll's statement), its instance is not registered and holds no job lock, and once its pool is ended, no session of it appears and it
 * logs nothing while the database's clock advances 1.5 s (15 periods of each of its timers).
 */
async function expectQuiet(harness: SchedulerHarness, pool: pg.Pool, name: string): Promise<void> {
  const scheduler = harness.scheduler;
  expect(await scheduler.readiness()).toMatchObject({ ready: false, workersStarted: false });
  expect(pool.waitingCount).toBe(0);
  expect(pool.totalCount - pool.idleCount).toBe(0);
  expect(await registered(scheduler.instanceId)).toBe(false);
  // no job left locked by it (a poll in flight at the stop, or a job queued ahead of its slot)
  const { rows: locked } = await db.pool.query(
    "SELECT name FROM agenda_jobs WHERE locked_at IS NOT NULL AND last_modified_by = $1",
    [scheduler.instanceId],
  );
  expect(locked).toEqual([]);
  expect(await sessionsNamed(name)).toBe(pool.totalCount); // no liveness session: only idle pooled ones
  await pool.end();
  await pollUntil("the pool's sessions closed", async () => (await sessionsNamed(name)) === 0);
  const linesAtStop = harness.logs.lines.length;
  const seen: number[] = [];
  const { rows: clock } = await db.pool.query<{ from: Date }>("SELECT clock_timestamp() AS from");
  const from = clock[0]?.from;
  await pollUntil(
    "1.5 s of the database's clock",
    async () => {
      seen.push(await sessionsNamed(name));
      const { rows } = await db.pool.query<{ done: boolean }>(
        "SELECT clock_timestamp() > $1::timestamptz + interval '1500 milliseconds' AS done",
        [from],
      );
      return rows[0]?.done === true;
    },
    { intervalMs: 50 },
  );
  expect(seen.filter((count) => count > 0)).toEqual([]);
  expect(harness.logs.lines.slice(linesAtStop)).toEqual([]);
}

const STOP_POINTS: Array<{ when: string; arm: (scheduler: Scheduler) => void }> = [
  { when: "while the schema is prepared", arm: (scheduler) => void scheduler.stop() },
  {
    when: "once the config was read",
    arm: (scheduler) => scheduler.once("config:loaded", () => void scheduler.stop()),
  },
  {
    when: "after the first reconcile",
    arm: (scheduler) => scheduler.once("reconciled", () => void scheduler.stop()),
  },
];

it.each(STOP_POINTS)(
  "stop() $when, during start(): start rejects SCHEDULER_STOPPED and nothing is left running",
  async ({ when, arm }) => {
    const name = `lc-start-${when.replaceAll(" ", "-")}`;
    const pool = namedPool(name);
    const harness = SchedulerHarness.create(pool, [{ name: "lc-quick", handler: async () => {} }], {
      ...BUSY_TIMERS,
      instanceId: name,
    });
    await harness.writeRaw('tasks:\n  - name: lc-quick\n    enabled: true\n    cron: "* * * * * *"\n');
    const starting = harness.scheduler.start();
    arm(harness.scheduler);
    await expect(starting).rejects.toMatchObject({ code: "SCHEDULER_STOPPED" });
    const stopping = harness.scheduler.stop();
    expect(harness.scheduler.stop()).toBe(stopping);
    expect(await stopping).toEqual({ completed: 0, handedOff: [], abandoned: [] });
    await expectQuiet(harness, pool, name);
    await harness.stop();
  },
);

it("stop() while start() is starting the workers (its instance registration held up): the workers that started are stopped", async () => {
  const name = "lc-start-workers";
  const pool = namedPool(name);
  const harness = SchedulerHarness.create(pool, [{ name: "lc-workers", handler: async () => {} }], {
    ...BUSY_TIMERS,
    instanceId: name,
  });
  await harness.writeRaw('tasks:\n  - name: lc-workers\n    enabled: true\n    cron: "* * * * * *"\n');
  // an uncommitted row with the same id: the registration's INSERT waits for this transaction
  const blocker = await db.pool.connect();
  await blocker.query("BEGIN");
  await blocker.query(
    "INSERT INTO cronwarden_instances (instance_id, started_at, server_started_at) VALUES ($1, now(), pg_postmaster_start_time())",
    [name],
  );
  const starting = harness.scheduler.start();
  const rejected = starting.then(
    () => undefined,
    (error: unknown) => error,
  );
  await pollUntil("the registration waiting on the row", async () => {
    const { rows } = await db.pool.query(
      "SELECT 1 FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock' AND query LIKE '%cronwarden_instances%'",
      [name],
    );
    return rows.length > 0;
  });
  const stopping = harness.scheduler.stop();
  await blocker.query("ROLLBACK");
  blocker.release();
  expect(await rejected).toMatchObject({ code: "SCHEDULER_STOPPED" });
  expect(await stopping).toEqual({ completed: 0, handedOff: [], abandoned: [] });
  expect(harness.logs.find((line) => line.msg === "engine started: polling for due runs")).toBeDefined();
  await expectQuiet(harness, pool, name);
  await harness.stop();
});

it("stop() awaits a retention prune in flight, and the prune completes", async () => {
  const name = "lc-prune";
  const pool = namedPool(name);
  const harness = SchedulerHarness.create(pool, [{ name: "lc-prune", handler: async () => {} }], {
    instanceId: name,
    runLogRetentionDays: 30,
  });
  await harness.writeRaw('tasks:\n  - name: lc-prune\n    enabled: true\n    cron: "0 0 1 1 *"\n');
  await harness.scheduler.start();
  const { rows: inserted } = await db.pool.query<{ id: string }>(
    `INSERT INTO agenda_logs (timestamp, level, event, job_name, message, meta)
     VALUES (now() - interval '60 days', 'info', 'success', 'lc-prune', 'job completed', '{}'::jsonb)
     RETURNING id`,
  );
  const id = inserted[0]?.id;
  // the test holds the old row: the prune's DELETE waits for this transaction
  const holder = await db.pool.connect();
  await holder.query("BEGIN");
  await holder.query("SELECT id FROM agenda_logs WHERE id = $1 FOR UPDATE", [id]);
  const pruned = harness.scheduler.pruneRunHistory();
  await pollUntil("the prune waiting on the row", async () => {
    const { rows } = await db.pool.query(
      "SELECT 1 FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock' AND query LIKE 'DELETE FROM \"agenda_logs%'",
      [name],
    );
    return rows.length > 0;
  });
  let stopped = false;
  const stopping = harness.scheduler.stop().then((result) => {
    stopped = true;
    return result;
  });
  // the drain's last step: the instance deregistered; only the prune is left
  await pollUntil("the drain done", async () => !(await registered(name)));
  await harness.logs.waitFor(
    "the stop waiting",
    (line) => line.msg === "stopping: no new runs; waiting for running ones",
  );
  const { rows: held } = await db.pool.query(
    "SELECT 1 FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'",
    [name],
  );
  expect(held.length).toBe(1); // still blocked, so stop() cannot have finished...
  expect(stopped).toBe(false); // ...and has not
  await holder.query("COMMIT");
  holder.release();
  expect(await stopping).toEqual({ completed: 0, handedOff: [], abandoned: [] });
  expect(await pruned).toBe(1);
  const { rows: left } = await db.pool.query("SELECT 1 FROM agenda_logs WHERE id = $1", [id]);
  expect(left).toEqual([]);
  await harness.stop();
  await pool.end();
});

import pg from "pg";
import { afterAll, beforeAll, expect, it } from "vitest";
import { systemClock } from "../../src/core/clock.js";
import { DependencyCoordinator } from "../../src/dependencies/coordinator.js";
import { AgendaEngine } from "../../src/engine/agendaEngine.js";
import { encodeRunMeta } from "../../src/engine/runLogMeta.js";
import { insertRunLogRows } from "../../src/engine/sql/runLog.js";
import { createTestDatabase, type TestDatabase } from "../helpers/database.js";
import { LogCapture } from "../helpers/logs.js";
import { pollUntil } from "../helpers/poll.js";

/**
 * A failover cuts the pool's connections while an upstream's run opens and decides its
 * downstream's wait (found by test/integration/patroni.test.ts: downstream slots with no run and no
 * record). Against a real PostgreSQL: the coordinator's statements block on a lock of the waits
 * table and their backends are terminated (SQLSTATE 57P01, as a server going away), both at the
 * run's start and at its outcome. The wait must still be opened and decided once the database
 * answers again: the sweeper decides only waits that exist.
 */

const APP = "dependency-outage-test";
let db: TestDatabase;
let pool: pg.Pool;

beforeAll(async () => {
  db = await createTestDatabase();
  const setup = new AgendaEngine({
    pool: db.pool,
    instanceId: "setup",
    processEveryMs: 1000,
    lockLifetimeMs: 10_000,
    logger: new LogCapture().logger,
  });
  await setup.prepare(); // the schema; the engine never starts, so nothing else runs or sweeps
  await setup.createJob("outage-up", "0 0 1 1 *", "UTC", true);
  await setup.createJob("outage-down", "", "UTC", true, {
    upstreams: ["outage-up"],
    when: "allSucceeded",
    waitAtMost: null,
    waitAtMostMs: null,
  });
  pool = new pg.Pool({ connectionString: db.url, max: 4, application_name: APP });
  pool.on("error", () => {}); // the terminated connections
});

afterAll(async () => {
  await pool?.end();
  await db?.drop();
});

/**
 * Holds an exclusive lock on the waits table while `during` runs, terminates the coordinator's
 * backends that queue behind it (`expected` of them), then lets go.
 */
async function cutWhileLocked(expected: number, during: () => void): Promise<void> {
  const locker = await db.pool.connect();
  try {
    await locker.query("BEGIN");
    await locker.query("LOCK TABLE cronwarden_dependency_waits IN ACCESS EXCLUSIVE MODE");
    during();
    const pids = await pollUntil(`${expected} coordinator statement(s) waiting on the lock`, async () => {
      const { rows } = await db.pool.query<{ pid: number }>(
        "SELECT pid FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'",
        [APP],
      );
      return rows.length >= expected ? rows.map((row) => row.pid) : undefined;
    });
    await db.pool.query("SELECT pg_terminate_backend(pid) FROM unnest($1::int[]) AS pid", [pids]);
    await pollUntil("the terminated backends gone", async () => {
      const { rows } = await db.pool.query("SELECT 1 FROM pg_stat_activity WHERE pid = ANY($1::int[])", [
        pids,
      ]);
      return rows.length === 0;
    });
  } finally {
    await locker.query("COMMIT").catch(() => {});
    locker.release();
  }
}

it("an upstream run whose wait statements lose their connection still opens and decides its downstream's wait", async () => {
  const logs = new LogCapture();
  const coordinator = new DependencyCoordinator({
    pool,
    instanceId: "outage-instance",
    logger: logs.logger,
    hooks: {},
    wake: () => {},
    clock: systemClock,
  });
  const slot = new Date(Date.UTC(2026, 11, 7, 18, 24, 14));
  const failed = () =>
    logs.find((line) => line.level === 40 && line.component === "dependencies") !== undefined;

  // the run starts: its downstream's wait is being opened when the connection goes
  await cutWhileLocked(1, () =>
    coordinator.runStarted({
      taskName: "outage-up",
      jobId: "outage-up-job",
      scheduledAt: slot,
      startedAt: new Date(),
      attempt: 1,
      trigger: "schedule",
      signal: new AbortController().signal,
      rerunOf: undefined,
    }),
  );
  // its outcome row is written (by the run recorder, src/engine/runRecorder.ts), then the decision
  // loses its connection too
  const meta = { scheduledAt: slot, instanceId: "outage-instance", outcome: "succeeded" as const };
  await insertRunLogRows(db.pool, [
    {
      timestamp: new Date(),
      level: "info",
      event: "success",
      jobId: "outage-up-job",
      jobName: "outage-up",
      message: "job succeeded",
      agendaName: "outage-instance",
      meta: encodeRunMeta(meta),
    },
  ]);
  await cutWhileLocked(1, () => coordinator.outcomeRecorded("outage-up", meta));

  // the work is tried again once the database answers: the downstream's run is queued for the slot
  const state = await pollUntil(
    "the downstream's wait decided, or the work given up",
    async () => {
      const { rows } = await db.pool.query<{ state: string }>(
        "SELECT state FROM cronwarden_dependency_waits WHERE task = 'outage-down' AND slot = $1",
        [slot],
      );
      const row = rows[0];
      if (row && row.state !== "waiting") return row.state;
      return failed() ? "given up" : undefined;
    },
    { timeoutMs: 30_000, intervalMs: 50 },
  );
  expect(state).toBe("queued");
  expect(failed()).toBe(false);
  await coordinator.stop();
}, 60_000);

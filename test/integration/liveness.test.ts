import pg from "pg";
import { afterAll, beforeAll, expect, it } from "vitest";
import { AgendaEngine } from "../../src/engine/agendaEngine.js";
import { InstanceLiveness } from "../../src/engine/liveness.js";
import type { ReleasedJobRow } from "../../src/engine/sql.js";
import { LIVENESS_LOCK_NAMESPACE } from "../../src/engine/sql.js";
import { createTestDatabase, type TestDatabase } from "../helpers/database.js";
import { LogCapture } from "../helpers/logs.js";
import { pollUntil } from "../helpers/poll.js";

/**
 * Instance liveness against a real PostgreSQL, its checks driven by hand: which locks a check
 * releases, and when it holds back.
 */

const LIFETIME_MS = 15_000;
let db: TestDatabase;
const logs = new LogCapture();
/** A live instance: its own session holds its liveness lock. */
let aliveSession: pg.Client;

beforeAll(async () => {
  db = await createTestDatabase();
  const engine = new AgendaEngine({
    pool: db.pool,
    instanceId: "setup",
    processEveryMs: 1000,
    lockLifetimeMs: LIFETIME_MS,
    logger: logs.logger,
  });
  await engine.prepare(); // the schema; its workers never start
  for (const name of ["started", "ahead", "old-version", "alive", "second", "restarted"])
    await engine.createJob(name, "0 0 * * *", "UTC", true);
  aliveSession = new pg.Client({ connectionString: db.url });
  await aliveSession.connect();
  await aliveSession.query("SELECT pg_advisory_lock($1, hashtext('alive-1'))", [LIVENESS_LOCK_NAMESPACE]);
});

afterAll(async () => {
  await aliveSession?.end();
  await db?.drop();
});

interface JobState {
  name: string;
  locked: boolean;
  next_run_at: Date;
  last_modified_by: string | null;
}

async function jobs(): Promise<Record<string, JobState>> {
  const { rows } = await db.pool.query<JobState>(
    "SELECT name, locked_at IS NOT NULL AS locked, next_run_at, last_modified_by FROM agenda_jobs ORDER BY name",
  );
  return Object.fromEntries(rows.map((row) => [row.name, row]));
}

it("releases the locks of a registered instance whose liveness lock is gone, once two checks in a row saw it dead", async () => {
  const future = new Date(Date.now() + 60 * 60_000);
  const ahead = new Date(Date.now() + 700);
  // dead-1 had started "started" (its run unfinished) and locked "ahead" before its slot
  await db.pool.query(
    `UPDATE agenda_jobs SET locked_at = now(), last_modified_by = 'dead-1', next_run_at = $1,
            last_run_at = now() - interval '1 second', last_finished_at = now() - interval '1 minute'
      WHERE name = 'started'`,
    [future],
  );
  await db.pool.query(
    "UPDATE agenda_jobs SET locked_at = now(), last_modified_by = 'dead-1', next_run_at = $1 WHERE name = 'ahead'",
    [ahead],
  );
  // an instance of a version without liveness (not registered), and a live one
  await db.pool.query(
    "UPDATE agenda_jobs SET locked_at = now(), last_modified_by = 'old-1', next_run_at = $1 WHERE name = 'old-version'",
    [future],
  );
  await db.pool.query(
    "UPDATE agenda_jobs SET locked_at = now(), last_modified_by = 'alive-1', next_run_at = $1 WHERE name = 'alive'",
    [future],
  );
  await db.pool.query("INSERT INTO cronwarden_instances (instance_id) VALUES ('dead-1'), ('alive-1')");
  // registered before the server's last restart: it has not taken its lock again yet, not dead
  await db.pool.query(
    "UPDATE agenda_jobs SET locked_at = now(), last_modified_by = 'before-restart', next_run_at = $1 WHERE name = 'restarted'",
    [future],
  );
  await db.pool.query(
    "INSERT INTO cronwarden_instances (instance_id, server_started_at) VALUES ('before-restart', pg_postmaster_start_time() - interval '1 hour')",
  );

  const released: ReleasedJobRow[] = [];
  const liveness = new InstanceLiveness({
    pool: db.pool,
    instanceId: "checker",
    checkEveryMs: 60 * 60_000, // checks run by hand below
    confirmAfterMs: 0,
    logger: logs.logger,
    onReleased: (rows) => released.push(...rows),
  });
  await liveness.start();
  try {
    expect(liveness.live).toBe(true);
    await liveness.check();
    expect(released).toEqual([]); // seen dead once: its session may be coming back
    expect((await jobs()).started?.locked).toBe(true);
    await liveness.check();
    const after = await jobs();
    expect(released.map((row) => [row.name, row.dead_instance]).sort()).toEqual([
      ["ahead", "dead-1"],
      ["started", "dead-1"],
    ]);
    // the started run is due now, to be re-run; the one locked ahead keeps its slot
    expect(after.started).toMatchObject({ locked: false });
    expect(after.started?.next_run_at.getTime()).toBeLessThan(future.getTime() - 50 * 60_000);
    expect(after.ahead).toMatchObject({ locked: false, next_run_at: ahead });
    expect(after["old-version"]).toMatchObject({ locked: true, last_modified_by: "old-1" });
    expect(after.alive).toMatchObject({ locked: true, last_modified_by: "alive-1" });
    expect(after.restarted).toMatchObject({ locked: true, last_modified_by: "before-restart" });
    const { rows } = await db.pool.query("SELECT instance_id FROM cronwarden_instances ORDER BY 1");
    expect(rows.map((row) => row.instance_id)).toEqual(["alive-1", "before-restart", "checker"]);

    // two checks in a row again for the next one
    released.length = 0;
    await db.pool.query(
      "UPDATE agenda_jobs SET locked_at = now(), last_modified_by = 'dead-2', next_run_at = $1 WHERE name = 'second'",
      [future],
    );
    await db.pool.query("INSERT INTO cronwarden_instances (instance_id) VALUES ('dead-2')");
    await liveness.check();
    expect(released).toEqual([]);
    await liveness.check();
    expect(released.map((row) => [row.name, row.dead_instance])).toEqual([["second", "dead-2"]]);
  } finally {
    await liveness.stop();
  }
  const { rows } = await db.pool.query("SELECT instance_id FROM cronwarden_instances ORDER BY 1");
  expect(rows.map((row) => row.instance_id)).toEqual(["alive-1", "before-restart"]); // a clean stop deregisters
});

it("an instance first seen dead is checked again half a second later, not a whole interval later", async () => {
  const future = new Date(Date.now() + 60 * 60_000);
  await db.pool.query(
    "UPDATE agenda_jobs SET locked_at = now(), last_modified_by = 'dead-3', next_run_at = $1 WHERE name = 'second'",
    [future],
  );
  await db.pool.query("INSERT INTO cronwarden_instances (instance_id) VALUES ('dead-3')");
  const released: ReleasedJobRow[] = [];
  const answers: boolean[] = [];
  const liveness = new InstanceLiveness({
    pool: db.pool,
    instanceId: "confirmer",
    checkEveryMs: 60 * 60_000, // no regular check comes within this test
    logger: logs.logger,
    onReleased: (rows) => released.push(...rows),
    onChecked: (answered) => answers.push(answered),
  });
  await liveness.start();
  try {
    await liveness.check(); // seen dead once: the confirming check follows by itself
    expect(answers[0]).toBe(true);
    await pollUntil("the confirming check released dead-3's lock", () => released.length > 0, {
      timeoutMs: 10_000,
    });
    expect(released.map((row) => [row.name, row.dead_instance])).toEqual([["second", "dead-3"]]);
    expect(answers.length).toBeGreaterThanOrEqual(2);
  } finally {
    await liveness.stop();
  }
});

it("an instance id whose previous process died with locks: released when the id takes its liveness lock again", async () => {
  const future = new Date(Date.now() + 60 * 60_000);
  await db.pool.query(
    `UPDATE agenda_jobs SET locked_at = now(), last_modified_by = 'pod-0', next_run_at = $1,
            last_run_at = now() - interval '1 second', last_finished_at = now() - interval '1 minute'
      WHERE name = 'started'`,
    [future],
  );
  const released: ReleasedJobRow[] = [];
  const liveness = new InstanceLiveness({
    pool: db.pool,
    instanceId: "pod-0",
    checkEveryMs: 60 * 60_000,
    logger: logs.logger,
    onReleased: (rows) => released.push(...rows),
  });
  await liveness.start();
  await liveness.stop();
  expect(released.map((row) => row.name)).toEqual(["started"]);
  expect((await jobs()).started?.locked).toBe(false);
});

it("an instance id whose liveness lock another session holds does not pass for it; it takes the lock once free", async () => {
  const liveness = new InstanceLiveness({
    pool: db.pool,
    instanceId: "alive-1",
    checkEveryMs: 60 * 60_000,
    logger: logs.logger,
    onReleased: () => {},
  });
  await liveness.start();
  try {
    expect(liveness.live).toBe(false);
    expect(logs.messages()).toContainEqual(
      expect.stringContaining('the liveness lock of instance id "alive-1" is held by another session'),
    );
    await aliveSession.query("SELECT pg_advisory_unlock($1, hashtext('alive-1'))", [LIVENESS_LOCK_NAMESPACE]);
    await pollUntil("the lock taken", () => liveness.live, { timeoutMs: 10_000 });
  } finally {
    await liveness.stop();
  }
});

it("a liveness session cut by the server (a restart, a failover) asks for a takeover hold when cut and again once back", async () => {
  const interruptions: boolean[] = [];
  const liveness = new InstanceLiveness({
    pool: db.pool,
    instanceId: "cut-1",
    checkEveryMs: 60 * 60_000,
    logger: logs.logger,
    onReleased: () => {},
    onSessionInterrupted: () => interruptions.push(liveness.live),
  });
  await liveness.start();
  try {
    expect(liveness.live).toBe(true);
    expect(interruptions).toEqual([]); // the first lock is no interruption
    await db.pool.query(
      `SELECT pg_terminate_backend(pid) FROM pg_locks
        WHERE locktype = 'advisory' AND classid = $1::bigint::oid AND objid = (hashtext('cut-1')::bigint & 4294967295)::oid`,
      [LIVENESS_LOCK_NAMESPACE],
    );
    // once when the session ended (not live), once when the lock was taken again (live)
    await pollUntil("the lock taken again", () => interruptions.length >= 2, { timeoutMs: 10_000 });
    expect(interruptions).toEqual([false, true]);
  } finally {
    await liveness.stop();
  }
});

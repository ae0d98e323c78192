import { randomUUID } from "node:crypto";
import { getCreateLogsTableSQL, getCreateTableSQL } from "@agendajs/postgres-backend";
import pg from "pg";
import { afterAll, beforeAll, expect, it } from "vitest";
import { checkSchema, inspectSchema, migrateSchema, SCHEMA_VERSION } from "../../src/engine/schema.js";
import { SLOT_INDEX, selectLastStart, writeRunLogRows } from "../../src/engine/sql.js";
import { readHistory, readRunDetail } from "../../src/status/runHistory.js";
import { STORE_MIGRATIONS } from "../../src/store/schema.js";
import { createTestDatabase, type TestDatabase } from "../helpers/database.js";

let db: TestDatabase;

beforeAll(async () => {
  db = await createTestDatabase();
});

afterAll(async () => {
  await db?.drop();
});

it("creates Agenda's schema once when many instances start together on an empty database", async () => {
  // one pool per "instance", so the CREATE statements really run concurrently
  const pools = Array.from({ length: 8 }, () => {
    const pool = new pg.Pool({ connectionString: db.url, max: 1 });
    pool.on("error", () => {}); // a client still closing when the database is dropped after the test
    return pool;
  });
  try {
    const results = await Promise.allSettled(pools.map((pool) => migrateSchema(pool)));
    expect(results.filter((result) => result.status === "rejected")).toEqual([]);
    // one of them migrated; the others found the schema current under the lock
    const migrated = results.map((result) => (result.status === "fulfilled" ? result.value.from : "failed"));
    expect(migrated.filter((from) => from === null)).toHaveLength(1);
    expect(migrated.filter((from) => from === SCHEMA_VERSION)).toHaveLength(7);
  } finally {
    await Promise.all(pools.map((pool) => pool.end()));
  }
  // the run log's partitions aside (test/integration/runLogPartitions.test.ts)
  const tables = await db.pool.query(
    `SELECT relname AS table_name FROM pg_class
      WHERE relnamespace = 'public'::regnamespace AND relkind IN ('r', 'p') AND NOT relispartition ORDER BY relname`,
  );
  expect(tables.rows.map((row) => row.table_name)).toEqual([
    "agenda_jobs",
    "agenda_logs",
    "cronwarden_audit",
    "cronwarden_backfill_slots",
    "cronwarden_backfills",
    "cronwarden_dependency_waits",
    "cronwarden_desired_state",
    "cronwarden_instance_deaths",
    "cronwarden_instances",
    "cronwarden_pause",
    "cronwarden_run_starts",
    "cronwarden_schema",
    "cronwarden_shard_slots",
    "cronwarden_shards",
  ]);
});

it("upgrades a database from before schema versions in place, keeping its rows", async () => {
  const old = await createTestDatabase();
  try {
    // what earlier releases created: Agenda's tables and version 1 of cronwarden's, no version row
    const client = await old.pool.connect();
    try {
      await client.query(getCreateTableSQL("agenda_jobs"));
      await client.query(getCreateLogsTableSQL("agenda_logs"));
      await STORE_MIGRATIONS[0]?.(client);
    } finally {
      client.release();
    }
    await old.pool.query(
      `INSERT INTO cronwarden_audit (namespace, task, kind, field, source, revision, instance)
       VALUES ('default', 'old', 'change', 'job', 'file', 'r1', 'i1')`,
    );
    const refused = await old.pool
      .query(
        `INSERT INTO cronwarden_audit (namespace, task, kind, field, source, revision, instance)
         VALUES ('default', 'old', 'run-now', 'run', 'admin API', 'r1', 'i1')`,
      )
      .then(
        () => "accepted",
        (error: { code?: string }) => error.code,
      );
    expect(refused).toBe("23514"); // version 1's check: no run-now rows yet
    expect(await inspectSchema(old.pool)).toEqual({
      version: null,
      missingTables: [
        "cronwarden_schema",
        "cronwarden_instances",
        "cronwarden_dependency_waits",
        "cronwarden_pause",
        "cronwarden_instance_deaths",
        "cronwarden_backfills",
        "cronwarden_backfill_slots",
        "cronwarden_run_starts",
        "cronwarden_shard_slots",
        "cronwarden_shards",
      ],
      current: false,
    });
    await expect(checkSchema(old.pool)).rejects.toThrow(
      /missing table\(s\): cronwarden_schema, cronwarden_instances, cronwarden_dependency_waits, cronwarden_pause, cronwarden_instance_deaths, cronwarden_backfills, cronwarden_backfill_slots, cronwarden_run_starts, cronwarden_shard_slots, cronwarden_shards.*cronwarden migrate/,
    );

    expect(await migrateSchema(old.pool)).toEqual({ from: null, to: SCHEMA_VERSION });
    expect(await inspectSchema(old.pool)).toEqual({
      version: SCHEMA_VERSION,
      missingTables: [],
      current: true,
    });
    await old.pool.query(
      `INSERT INTO cronwarden_audit (namespace, task, kind, field, source, revision, instance, actor)
       VALUES ('default', 'old', 'run-now', 'run', 'admin API', 'r1', 'i1', 'ops-alice')`,
    );
    const rows = await old.pool.query("SELECT kind, actor FROM cronwarden_audit ORDER BY id");
    expect(rows.rows).toEqual([
      { kind: "change", actor: null },
      { kind: "run-now", actor: "ops-alice" },
    ]);
    // a database at a newer version than this code is left alone
    await old.pool.query("UPDATE cronwarden_schema SET version = $1", [SCHEMA_VERSION + 1]);
    expect(await migrateSchema(old.pool)).toEqual({ from: SCHEMA_VERSION + 1, to: SCHEMA_VERSION + 1 });
    expect((await checkSchema(old.pool)).current).toBe(true);
  } finally {
    await old.drop();
  }
});

it("upgrades a database of version 9 in place: its rows read as before, and new runs write one row each", async () => {
  const old = await createTestDatabase();
  try {
    await migrateSchema(old.pool);
    // version 9's layout (step 11's conversion of a log that is not partitioned: test/integration/runLogPartitions.test.ts):
    // no table of runs in progress, Agenda's index by job id, the slot index with the id; nor the
    // later steps' tables (12: sharded tasks)
    await old.pool.query(`
      DROP TABLE cronwarden_run_starts;
      DROP TABLE cronwarden_shards, cronwarden_shard_slots;
      DROP INDEX agenda_logs_cw_unfinished_job_idx;
      DROP INDEX agenda_logs_cw_unfinished_name_idx;
      DROP INDEX agenda_logs_cw_slot_idx;
      CREATE INDEX agenda_logs_cw_slot_idx ON agenda_logs (job_name, (meta->>'scheduledAt'), id)
        WHERE event IN ('success', 'fail', 'retry');
      CREATE INDEX agenda_logs_job_id_idx ON agenda_logs (job_id, timestamp DESC);
      UPDATE cronwarden_schema SET version = 9;`);
    // its rows, two per run: a run that finished (start and record) and one that died (start only)
    const { rows: inserted } = await old.pool.query<{ id: string; event: string; message: string }>(
      `INSERT INTO agenda_logs (timestamp, level, event, job_id, job_name, message, duration, agenda_name, meta)
       VALUES ('2026-12-01T00:00:00.010Z', 'info', 'start', 'j1', 'old-task', 'finished', NULL, 'i1',
               '{"scheduledAt": "2026-12-01T00:00:00.000Z", "instanceId": "i1", "attempt": 1}'),
              ('2026-12-01T00:00:00.510Z', 'info', 'success', 'j1', 'old-task', 'job succeeded', 500, 'i1',
               '{"scheduledAt": "2026-12-01T00:00:00.000Z", "instanceId": "i1", "attempt": 1, "startedAt": "2026-12-01T00:00:00.010Z", "finishedAt": "2026-12-01T00:00:00.510Z", "outcome": "succeeded"}'),
              ('2026-12-01T00:01:00.010Z', 'info', 'start', 'j1', 'old-task', 'died', NULL, 'i1',
               '{"scheduledAt": "2026-12-01T00:01:00.000Z", "instanceId": "i1", "attempt": 1}')
       RETURNING id, event, message`,
    );
    const idOf = (message: string) => inserted.find((row) => row.message === message)?.id as string;

    expect(await migrateSchema(old.pool)).toEqual({ from: 9, to: SCHEMA_VERSION });
    const indexes = await old.pool.query<{ indexname: string; indexdef: string }>(
      "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'agenda_logs' ORDER BY indexname",
    );
    const names = indexes.rows.map((row) => row.indexname);
    expect(names).not.toContain("agenda_logs_job_id_idx");
    expect(names).toEqual(
      expect.arrayContaining(["agenda_logs_cw_unfinished_job_idx", "agenda_logs_cw_unfinished_name_idx"]),
    );
    expect(indexes.rows.find((row) => row.indexname === SLOT_INDEX)?.indexdef).not.toContain(", id)");

    // the old rows read as before: the history, the run detail of either start, the run that died
    const history = await readHistory(old.pool, { task: "old-task", limit: 10 });
    expect(history.runs.map((run) => [run.outcome, run.attempt, run.instanceId])).toEqual([
      ["succeeded", 1, "i1"],
    ]);
    expect(await readRunDetail(old.pool, idOf("finished"))).toMatchObject({
      outcome: "succeeded",
      recordId: history.runs[0]?.id,
    });
    expect(await readRunDetail(old.pool, idOf("died"))).toMatchObject({
      outcome: "interrupted",
      instanceId: "i1",
    });
    const dead = await selectLastStart(old.pool, "j1", new Date("2026-12-01T00:02:00Z"));
    expect(dead?.timestamp).toEqual(new Date("2026-12-01T00:01:00.010Z"));

    // a new run: its start is in progress (not in the log), its record is its one row, under the start's id
    const runId = randomUUID();
    const start = {
      id: runId,
      timestamp: new Date("2026-12-01T00:02:00.010Z"),
      level: "info",
      event: "start",
      jobId: "j1",
      jobName: "old-task",
      message: "job started",
      agendaName: "i2",
      meta: { scheduledAt: "2026-12-01T00:02:00.000Z", instanceId: "i2", attempt: 1 },
    };
    await writeRunLogRows(old.pool, [start]);
    expect(await readRunDetail(old.pool, runId)).toMatchObject({ outcome: "interrupted", instanceId: "i2" });
    expect((await selectLastStart(old.pool, "j1", new Date("2026-12-01T00:03:00Z")))?.agenda_name).toBe("i2");
    await writeRunLogRows(old.pool, [
      {
        ...start,
        replaces: runId,
        id: undefined,
        timestamp: new Date("2026-12-01T00:02:00.900Z"),
        event: "success",
        message: "job succeeded",
        duration: 890,
        meta: {
          ...start.meta,
          startedAt: "2026-12-01T00:02:00.010Z",
          finishedAt: "2026-12-01T00:02:00.900Z",
          outcome: "succeeded",
          started: true,
        },
      },
    ]);
    const { rows: logRows } = await old.pool.query(
      "SELECT id, event, meta FROM agenda_logs WHERE timestamp >= '2026-12-01T00:02:00Z'",
    );
    // one row; what its columns say (the instance) and attempt 1 of a started run are not repeated in meta
    expect(logRows).toEqual([
      {
        id: runId,
        event: "success",
        meta: {
          scheduledAt: "2026-12-01T00:02:00.000Z",
          startedAt: "2026-12-01T00:02:00.010Z",
          finishedAt: "2026-12-01T00:02:00.900Z",
          outcome: "succeeded",
          started: true,
        },
      },
    ]);
    const after = await readHistory(old.pool, { task: "old-task", limit: 10 });
    expect(after.runs.map((run) => [run.id, run.outcome, run.attempt, run.instanceId])).toEqual([
      [runId, "succeeded", 1, "i2"],
      [history.runs[0]?.id, "succeeded", 1, "i1"],
    ]);
    expect(await readRunDetail(old.pool, runId)).toMatchObject({ outcome: "succeeded", recordId: runId });
    // the run that died is still the last unfinished start before the new run
    expect((await selectLastStart(old.pool, "j1", new Date("2026-12-01T00:02:00Z")))?.agenda_name).toBe("i1");
  } finally {
    await old.drop();
  }
});

import { getCreateLogsTableSQL, getCreateTableSQL } from "@agendajs/postgres-backend";
import pg from "pg";
import { afterAll, beforeAll, expect, it } from "vitest";
import { checkSchema, inspectSchema, migrateSchema, SCHEMA_VERSION } from "../../src/engine/schema.js";
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
  const tables = await db.pool.query(
    "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' ORDER BY table_name",
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
    "cronwarden_schema",
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
      ],
      current: false,
    });
    await expect(checkSchema(old.pool)).rejects.toThrow(
      /missing table\(s\): cronwarden_schema, cronwarden_instances, cronwarden_dependency_waits, cronwarden_pause, cronwarden_instance_deaths, cronwarden_backfills, cronwarden_backfill_slots.*cronwarden migrate/,
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

import pg from "pg";
import { afterAll, beforeAll, expect, it } from "vitest";
import { migrateSchema } from "../../src/engine/schema.js";
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
    "cronwarden_desired_state",
    "cronwarden_schema",
  ]);
});

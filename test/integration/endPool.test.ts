import pg from "pg";
import { afterAll, beforeAll, expect, it } from "vitest";
import { endPool } from "../../src/serve/endPool.js";
import { createTestDatabase, type TestDatabase } from "../helpers/database.js";
import { LogCapture } from "../helpers/logs.js";

/** The service's shutdown ends its pool without hanging on a client that never comes back. */

let db: TestDatabase;

beforeAll(async () => {
  db = await createTestDatabase();
});

afterAll(async () => {
  await db?.drop();
});

it("ends a pool whose clients are all back, logging nothing", async () => {
  const pool = new pg.Pool({ connectionString: db.url, max: 2 });
  await pool.query("SELECT 1");
  const logs = new LogCapture();
  await endPool(pool, logs.logger, 5_000);
  expect(pool.ended).toBe(true);
  expect(logs.lines).toEqual([]);
});

it("goes on after its wait when a client is still checked out, and names how many", async () => {
  const pool = new pg.Pool({ connectionString: db.url, max: 2 });
  const held = await pool.connect();
  const logs = new LogCapture();
  await endPool(pool, logs.logger, 200);
  expect(logs.lines).toMatchObject([{ level: 50, checkedOut: 1, waitedMs: 200 }]);
  expect(pool.ended).toBe(false);
  held.release();
  await new Promise<void>((resolve, reject) => {
    const check = setInterval(() => {
      if (pool.ended) {
        clearInterval(check);
        resolve();
      }
    }, 10);
    setTimeout(() => reject(new Error("the pool did not end once its client came back")), 5_000);
  });
});

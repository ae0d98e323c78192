import pg from "pg";
import { afterAll, beforeAll, expect, it } from "vitest";
import { createTestDatabase, type TestDatabase } from "../helpers/database.js";
import { SchedulerHarness } from "../helpers/harness.js";

/**
 * Idle load does not grow with the number of tasks: Agenda's job processor sent one locking
 * statement per task name per poll; the engine's claim loop sends one for all names
 * (src/engine/claimLoop.ts).
 */

let db: TestDatabase;
let harness: SchedulerHarness | undefined;

beforeAll(async () => {
  db = await createTestDatabase();
});

afterAll(async () => {
  await harness?.stop();
  await db?.drop();
});

it("an idle instance with 60 tasks, none due, sends no per-task locking statement", async () => {
  const pool = new pg.Pool({ connectionString: db.url, max: 4 });
  const statements: { text: string; values: unknown[] }[] = [];
  const query = pool.query.bind(pool) as (...args: unknown[]) => unknown;
  (pool as unknown as { query: (...args: unknown[]) => unknown }).query = (...args: unknown[]) => {
    const text = args[0];
    statements.push({
      text: typeof text === "string" ? text : String((text as { text?: string })?.text),
      values: Array.isArray(args[1]) ? args[1] : [],
    });
    return query(...args);
  };
  const names = Array.from({ length: 60 }, (_, index) => `idle-${index}`);
  harness = await SchedulerHarness.start(
    pool,
    names.map((name) => ({ name, handler: async () => {} })),
    names.map((name) => ({ name, cron: "0 0 0 1 1 *" })), // once a year: never due here
    { processEveryMs: 200, antiEntropyMs: 0, missedSlotCheckMs: 0, healthProbeMs: 60_000 },
  );
  statements.length = 0;
  await new Promise((resolve) => setTimeout(resolve, 1500)); // several polls
  const locking = statements.filter(({ text }) => text.includes("FOR UPDATE SKIP LOCKED"));
  const claims = locking.filter(({ text }) => text.includes("due AS ("));
  expect(claims.length).toBeGreaterThanOrEqual(3); // it polled
  expect(claims.length).toBeLessThanOrEqual(1500 / 200 + 2); // once per poll
  expect(locking.length).toBe(claims.length); // no other locking statement: none per task name
  for (const claim of claims) expect(claim.values[2]).toBeNull(); // any name: one statement for all of them
  await harness.stop();
  harness = undefined;
  await pool.end();
});

it("an idle instance at default settings sends at most one statement a second over a minute, every session counted", async () => {
  // every statement of every session (the pool, the liveness session) goes through Client.query
  const prototype = pg.Client.prototype as unknown as { query: (...args: unknown[]) => unknown };
  const original = prototype.query;
  const statements: string[] = [];
  let counting = false;
  prototype.query = function (this: unknown, ...args: unknown[]) {
    if (counting) {
      const text = args[0];
      statements.push(typeof text === "string" ? text : String((text as { text?: string })?.text));
    }
    return original.apply(this, args);
  };
  try {
    const names = Array.from({ length: 200 }, (_, index) => `quiet-${index}`);
    harness = await SchedulerHarness.start(
      db.pool,
      names.map((name) => ({ name, handler: async () => {} })),
      names.map((name) => ({ name, cron: "0 0 0 1 1 *" })), // once a year: never due here
      { minIntervalMs: 60_000, processEveryMs: 5_000 }, // the defaults (the harness lowers them)
    );
    counting = true;
    const began = performance.now();
    // a minute holds every periodic statement at least once; the first anti-entropy pass comes a
    // minute and a quarter poll after the start (src/core/periodic.ts): the count runs until it
    const digest = (text: string) => text.includes("hashtextextended(");
    await new Promise((resolve) => setTimeout(resolve, 61_000));
    for (let waited = 0; !statements.some(digest) && waited < 15_000; waited += 100)
      await new Promise((resolve) => setTimeout(resolve, 100));
    counting = false;
    const perSecond = statements.length / ((performance.now() - began) / 1000);
    // liveness 0.5, poll 0.2, missed-slot check 0.07, dependency look 0.07, anti-entropy digest 0.02
    expect(perSecond, statements.join("\n")).toBeLessThanOrEqual(1);
    // the anti-entropy pass found no drift: its digest alone, without taking the reconcile lock
    expect(statements.filter(digest).length).toBeGreaterThanOrEqual(1);
    expect(statements.filter((text) => /advisory_(try_)?(un)?lock\(/.test(text))).toEqual([]);
  } finally {
    prototype.query = original;
    await harness?.stop();
    harness = undefined;
  }
}, 100_000);

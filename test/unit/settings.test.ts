import pg from "pg";
import { describe, expect, it } from "vitest";
import { createScheduler, FileConfigSource } from "../../src/index.js";
import { checkPoolSize, MIN_POOL_MAX, parseSchedulerSettings } from "../../src/scheduler/settings.js";
import { loadServiceSettings } from "../../src/serve/settings.js";

describe("scheduler settings", () => {
  it("polls at most every 5 s, and at half the minimum interval below 10 s", () => {
    expect(parseSchedulerSettings({}).processEveryMs).toBe(5_000);
    expect(parseSchedulerSettings({ minIntervalMs: 10_000 }).processEveryMs).toBe(5_000);
    expect(parseSchedulerSettings({ minIntervalMs: 4_000 }).processEveryMs).toBe(2_000);
    expect(parseSchedulerSettings({ minIntervalMs: 1_000 }).processEveryMs).toBe(500);
  });

  it("keeps an explicit poll up to the minimum interval and refuses one above it, naming both", () => {
    expect(parseSchedulerSettings({ minIntervalMs: 1_000, processEveryMs: 1_000 }).processEveryMs).toBe(
      1_000,
    );
    expect(() => parseSchedulerSettings({ minIntervalMs: 1_000, processEveryMs: 1_500 })).toThrow(
      /processEveryMs: 1500 ms exceeds minIntervalMs 1 s: the claim loop polls less often than the shortest interval, so a slot could start up to a poll late; lower processEveryMs or raise minIntervalMs/,
    );
  });

  it("runs 20 handlers at once by default and refuses a concurrency below 1", () => {
    expect(parseSchedulerSettings({}).maxConcurrency).toBe(20);
    expect(parseSchedulerSettings({ maxConcurrency: 3 }).maxConcurrency).toBe(3);
    expect(() => parseSchedulerSettings({ maxConcurrency: 0 })).toThrow(/maxConcurrency/);
  });

  it("refuses a pool of fewer than 3 connections, naming its size and the fix", () => {
    expect(MIN_POOL_MAX).toBe(3);
    for (const max of [1, 2])
      expect(() => checkPoolSize(max)).toThrow(
        new RegExp(`pool: max is ${max};.* give the pool at least 3 connections \\(pg's default is 10\\)`),
      );
    for (const max of [3, 10, undefined]) expect(() => checkPoolSize(max)).not.toThrow();
  });

  it("createScheduler refuses such a pool before it connects (with 2 it hung at its first reconcile)", async () => {
    const pool = new pg.Pool({ connectionString: "postgres://nobody@127.0.0.1:1/none", max: 2 });
    const config = new FileConfigSource({ path: "/nonexistent/tasks.yaml" });
    expect(() => createScheduler({ pool, config })).toThrow(/pool: max is 2;/);
    expect(pool.totalCount).toBe(0);
    await pool.end();
  });
});

describe("service settings", () => {
  it("refuses CRONWARDEN_PG_POOL_MAX below the scheduler's minimum, and takes 3", () => {
    expect(() => loadServiceSettings({ CRONWARDEN_PG_POOL_MAX: "2" })).toThrow(
      /CRONWARDEN_PG_POOL_MAX="2": must be at least 3/,
    );
    expect(loadServiceSettings({ CRONWARDEN_PG_POOL_MAX: "3" }).CRONWARDEN_PG_POOL_MAX).toBe(3);
  });

  it("has no metrics listener unless CRONWARDEN_METRICS_PORT is set; it binds to loopback unless told", () => {
    const unset = loadServiceSettings({});
    expect(unset.CRONWARDEN_METRICS_PORT).toBeUndefined();
    expect(unset.CRONWARDEN_METRICS_HOST).toBe("127.0.0.1");
    const set = loadServiceSettings({ CRONWARDEN_METRICS_PORT: "9464", CRONWARDEN_METRICS_HOST: "0.0.0.0" });
    expect([set.CRONWARDEN_METRICS_PORT, set.CRONWARDEN_METRICS_HOST]).toEqual([9464, "0.0.0.0"]);
    expect(() => loadServiceSettings({ CRONWARDEN_METRICS_PORT: "70000" })).toThrow(
      /CRONWARDEN_METRICS_PORT="70000": must be at most 65535/,
    );
  });
});

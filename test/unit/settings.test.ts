import { describe, expect, it } from "vitest";
import { parseSchedulerSettings } from "../../src/scheduler/settings.js";

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
});

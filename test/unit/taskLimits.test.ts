import { describe, expect, it } from "vitest";
import { parseDesiredState } from "../../src/config/desiredState.js";
import { decideLimits, TaskLimits } from "../../src/isolation/taskLimits.js";

const isolated = { timeoutMs: 60_000, memoryLimitMb: 256 };
const inProcess = { timeoutMs: 60_000, memoryLimitMb: undefined };

describe("decideLimits", () => {
  it("takes what lowers the code's bounds, and the bounds where the config says nothing", () => {
    expect(decideLimits(isolated, { timeoutMs: 1000, memoryLimitMb: 64 })).toEqual({
      ok: true,
      limits: { timeoutMs: 1000, memoryLimitMb: 64 },
    });
    expect(decideLimits(isolated, {})).toEqual({ ok: true, limits: isolated });
    expect(decideLimits(isolated, { timeoutMs: 60_000 })).toEqual({ ok: true, limits: isolated });
    // no timeout in code: the config may set one
    expect(decideLimits({ timeoutMs: undefined, memoryLimitMb: undefined }, { timeoutMs: 5000 })).toEqual({
      ok: true,
      limits: { timeoutMs: 5000, memoryLimitMb: undefined },
    });
  });

  it("refuses what raises a bound, and a heap limit for an in-process task", () => {
    expect(decideLimits(isolated, { timeoutMs: 120_000, memoryLimitMb: 512 })).toEqual({
      ok: false,
      problems: [
        {
          field: "timeout",
          value: "2m",
          reason:
            "is above the task's timeoutMs set in code (1m); the config may only lower it: raise timeoutMs in the registration to allow more",
        },
        {
          field: "memoryLimit",
          value: "512MB",
          reason:
            "is above the task's memoryLimitMb set in code (256 MB); the config may only lower it: raise memoryLimitMb in the registration to allow more",
        },
      ],
    });
    expect(decideLimits(inProcess, { memoryLimitMb: 64 })).toMatchObject({
      ok: false,
      problems: [{ field: "memoryLimit", value: "64MB" }],
    });
  });
});

describe("TaskLimits", () => {
  it("keeps a task's limits when a snapshot's are refused, and returns to the code's when the config drops them", () => {
    const limits = new TaskLimits(new Map([["t", isolated]]));
    expect(limits.apply(new Map([["t", { timeoutMs: 1000 }]]), new Set()).size).toBe(0);
    expect(limits.of("t")).toEqual({ timeoutMs: 1000, memoryLimitMb: 256 });
    expect([...limits.apply(new Map([["t", { timeoutMs: 999_999 }]]), new Set()).keys()]).toEqual(["t"]);
    expect(limits.of("t")).toEqual({ timeoutMs: 1000, memoryLimitMb: 256 });
    // an entry refused at parse keeps its task's last valid state
    limits.apply(new Map(), new Set(["t"]));
    expect(limits.of("t")).toEqual({ timeoutMs: 1000, memoryLimitMb: 256 });
    limits.apply(new Map(), new Set());
    expect(limits.of("t")).toEqual(isolated);
  });
});

describe("the config's limit fields", () => {
  const parse = (entry: Record<string, unknown>) =>
    parseDesiredState(
      { tasks: [{ name: "t", enabled: true, cron: "0 * * * *", ...entry }] },
      {
        defaultTimezone: "UTC",
        rules: { minIntervalMs: 60_000 },
        now: new Date(0),
        source: "test",
        revision: "1",
      },
    );

  it("reads timeout as a duration and memoryLimit as MB or GB", () => {
    expect(parse({ timeout: "90s", memoryLimit: "1GB" }).tasks[0]).toMatchObject({
      timeoutMs: 90_000,
      memoryLimitMb: 1024,
    });
    expect(parse({ memoryLimit: 128 }).tasks[0]).toMatchObject({ memoryLimitMb: 128 });
  });

  it("refuses an entry whose limit is not readable, naming the field, the value and the reason", () => {
    expect(parse({ timeout: "soon" }).rejected[0]).toMatchObject({
      field: "timeout",
      value: "soon",
      reason: expect.stringMatching(/is not a duration/),
    });
    expect(parse({ memoryLimit: "lots" }).rejected[0]).toMatchObject({
      field: "memoryLimit",
      value: "lots",
      reason: 'must be a size such as "128MB" or "1GB", or a whole number of MB',
    });
    // with an unknown key beside it, both are reported
    const both = parse({ memoryLimit: "lots", bogus: 1 }).rejected[0];
    expect(both?.problems?.map((problem) => problem.field)).toEqual(expect.arrayContaining(["memoryLimit"]));
  });
});

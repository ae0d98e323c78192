import { describe, expect, it } from "vitest";
import { describeProblems, parseDesiredState } from "../../src/config/desiredState.js";

const options = {
  defaultTimezone: "UTC",
  rules: { minIntervalMs: 60_000 },
  now: new Date("2026-12-01T00:00:00Z"),
  source: "file tasks.yaml",
  revision: "r1",
};

function parse(entry: Record<string, unknown>) {
  return parseDesiredState(
    {
      tasks: [
        { name: "good", enabled: true, cron: "0 2 * * *" },
        { name: "t", enabled: true, ...entry },
      ],
    },
    options,
  );
}

describe("policy fields in the config", () => {
  it("accepts catchUp and fills what it leaves out with the default", () => {
    const state = parseDesiredState(
      {
        tasks: [
          {
            name: "a",
            enabled: true,
            cron: "0 2 * * *",
            catchUp: { window: "6h", runs: "all" },
            overlap: "skip",
          },
          { name: "b", enabled: true, cron: "0 2 * * *", catchUp: { runs: "none" } },
          { name: "c", enabled: true, cron: "0 2 * * *" },
        ],
      },
      options,
    );
    expect(state.rejected).toEqual([]);
    expect(state.tasks.map((task) => task.catchUp)).toEqual([
      { windowMs: 6 * 3_600_000, runs: "all" },
      { windowMs: 3_600_000, runs: "none" },
      undefined,
    ]);
  });

  // the bad-input list: each rejected alone, with field, value and reason
  it.each([
    [{ every: "0s" }, "every", "0s", /longer than 0/],
    [{ every: "-5m" }, "every", "-5m", /negative/],
    [{ every: "fast" }, "every", "fast", /not a duration/],
    [{ at: "next tuesday" }, "at", "next tuesday", /ISO 8601/],
    [{ at: "2026-12-45T03:00:00Z" }, "at", "2026-12-45T03:00:00Z", /not a real date-time/],
    [{ cron: "0 2 * * *", catchUp: { window: "400d" } }, "catchUp.window", "400d", /over a year/],
    [{ cron: "0 2 * * *", catchUp: { runs: "some" } }, "catchUp.runs", "some", /none, latest, all/],
    [
      { cron: "0 2 * * *", catchUp: { window: "6h", later: true } },
      "catchUp",
      { window: "6h", later: true },
      /unknown key/,
    ],
    [{ cron: "0 2 * * *", catchUp: "6h" }, "catchUp", "6h", /must be an object/],
    [{ cron: "0 2 * * *", overlap: "parallel" }, "overlap", "parallel", /skip, queueOne, cancelRunning/],
    [
      { cron: "0 2 * * *", every: "15m" },
      "cron+every",
      { cron: "0 2 * * *", every: "15m" },
      /keep exactly one/,
    ],
    [{}, "cron", undefined, /schedule is required/],
    [{ cron: "0 2 * * *", pauseOnFailure: 0 }, "pauseOnFailure", 0, /from 1 to 1000/],
    [{ cron: "0 2 * * *", pauseOnFailure: -3 }, "pauseOnFailure", -3, /from 1 to 1000/],
    [{ cron: "0 2 * * *", pauseOnFailure: 1001 }, "pauseOnFailure", 1001, /from 1 to 1000/],
    [{ cron: "0 2 * * *", pauseOnFailure: 2.5 }, "pauseOnFailure", 2.5, /whole number/],
    [{ cron: "0 2 * * *", pauseOnFailure: "3" }, "pauseOnFailure", "3", /whole number/],
    [{ cron: "0 2 * * *", pauseOnFailure: true }, "pauseOnFailure", true, /leave it out to never pause/],
  ])("%j is rejected alone", (entry, field, value, reason) => {
    const state = parse(entry);
    expect(state.tasks.map((task) => task.name)).toEqual(["good"]);
    expect(state.rejected).toHaveLength(1);
    const [rejection] = state.rejected;
    expect(rejection).toMatchObject({ index: 1, name: "t", field, value });
    expect(rejection?.reason).toMatch(reason);
    expect(describeProblems(rejection as never)[0]).toContain(`"t": ${field}`);
  });

  it("accepts every: as an interval schedule, stored as Agenda's human interval", () => {
    const state = parseDesiredState(
      {
        tasks: [
          { name: "poll", enabled: true, every: "15m" },
          { name: "daily", enabled: true, every: "1d", catchUp: { runs: "all", window: "3d" } },
        ],
      },
      options,
    );
    expect(state.rejected).toEqual([]);
    expect(state.tasks).toEqual([
      { name: "poll", enabled: true, cron: "15 minutes", timezone: "UTC", every: "15m" },
      {
        name: "daily",
        enabled: true,
        cron: "1 day",
        timezone: "UTC",
        every: "1d",
        catchUp: { windowMs: 3 * 86_400_000, runs: "all" },
      },
    ]);
  });

  it.each([
    ["30s", /shorter than the minimum interval of 1 min/],
    ["1500ms", /whole number of seconds/],
    ["400d", /over a year/],
  ])("every: %s is refused", (every, reason) => {
    const [rejection] = parse({ every }).rejected;
    expect(rejection).toMatchObject({ field: "every", value: every });
    expect(rejection?.reason).toMatch(reason);
  });

  it("accepts at: as a one-shot, named `at <ISO time>` where a schedule string is expected", () => {
    const state = parse({ at: "2026-12-01T04:00:00+01:00" });
    expect(state.rejected).toEqual([]);
    expect(state.tasks[1]).toEqual({
      name: "t",
      enabled: true,
      cron: "at 2026-12-01T03:00:00.000Z",
      timezone: "UTC",
      at: "2026-12-01T03:00:00.000Z",
    });
  });

  it("reports every problem of an entry at once", () => {
    const state = parse({ cron: "*/61 * * * *", catchUp: { window: "2y" }, overlap: 3 });
    const [rejection] = state.rejected;
    expect(rejection?.problems?.map((problem) => problem.field)).toEqual([
      "cron",
      "catchUp.window",
      "overlap",
    ]);
  });

  it("accepts overlap and jitter", () => {
    const state = parse({ cron: "0 2 * * *", overlap: "cancelRunning", jitter: "30s" });
    expect(state.rejected).toEqual([]);
    expect(state.tasks[1]).toMatchObject({ overlap: "cancelRunning", jitterMs: 30_000 });
  });
});

describe("pauseOnFailure in the config", () => {
  it("is accepted as a whole number of failed slots; absent means never", () => {
    const state = parse({ cron: "0 2 * * *", pauseOnFailure: 3 });
    expect(state.rejected).toEqual([]);
    expect(state.tasks[1]).toMatchObject({ pauseOnFailure: 3 });
    expect(state.tasks[0]?.pauseOnFailure).toBeUndefined();
  });
});

describe("jitter in the config", () => {
  it("is accepted below the schedule's shortest gap, refused at or above it", () => {
    const ok = parse({ cron: "*/5 * * * *", jitter: "30s" });
    expect(ok.rejected).toEqual([]);
    expect(ok.tasks[1]?.jitterMs).toBe(30_000);
    const [tooLong] = parse({ cron: "*/5 * * * *", jitter: "5m" }).rejected;
    expect(tooLong).toMatchObject({ field: "jitter", value: "5m" });
    expect(tooLong?.reason).toMatch(/shorter than the schedule's shortest gap between two runs \(5m\)/);
    const [bad] = parse({ cron: "*/5 * * * *", jitter: "soon" }).rejected;
    expect(bad).toMatchObject({ field: "jitter", value: "soon" });
  });
});

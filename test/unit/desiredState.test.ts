import { describe, expect, it } from "vitest";
import { describeRejection, parseDesiredState } from "../../src/config/desiredState.js";

const options = {
  defaultTimezone: "Europe/Berlin",
  rules: { minIntervalMs: 60_000 },
  now: new Date("2026-03-01T00:00:00Z"),
  source: "file tasks.yaml",
  revision: "abc",
};

describe("parseDesiredState", () => {
  it("keeps valid entries, fills the default timezone and normalises spacing", () => {
    const state = parseDesiredState(
      {
        tasks: [
          { name: "report", enabled: true, cron: "0  */5 * * * *" },
          { name: "b", enabled: false, cron: "@daily", timezone: "UTC" },
        ],
      },
      options,
    );
    expect(state).toEqual({
      tasks: [
        { name: "report", enabled: true, cron: "0 */5 * * * *", timezone: "Europe/Berlin" },
        { name: "b", enabled: false, cron: "@daily", timezone: "UTC" },
      ],
      rejected: [],
      source: "file tasks.yaml",
      revision: "abc",
      document: expect.anything(),
      confirmDisableAll: false,
    });
  });

  it("rejects an invalid entry alone, naming index, task, field, value and reason", () => {
    const state = parseDesiredState(
      {
        tasks: [
          { name: "good", enabled: true, cron: "* * * * *" },
          { name: "syncReport", enabled: true, cron: "*/61 * * * *" },
          { name: "typo", enabled: "yes", cron: "* * * * *" },
          { name: "extra", enabled: true, cron: "* * * * *", enable: true },
          { name: "tz", enabled: true, cron: "* * * * *", timezone: "Mars/Base" },
        ],
      },
      options,
    );
    expect(state.tasks.map((task) => task.name)).toEqual(["good"]);
    expect(state.rejected.map(describeRejection)).toEqual([
      'config tasks[1] "syncReport": cron "*/61 * * * *" is invalid: minute field "*/61": step 61 is outside 1-59',
      'config tasks[2] "typo": enabled "yes" is invalid: must be true or false',
      'config tasks[3] "extra": (entry) {"name":"extra","enabled":true,"cron":"* * * * *","enable":true} is invalid: unknown key(s) enable',
      'config tasks[4] "tz": timezone "Mars/Base" is invalid: is not an IANA timezone name (examples: "UTC", "Europe/Berlin", "Asia/Shanghai")',
    ]);
  });

  it("rejects every entry of a name that appears twice", () => {
    const state = parseDesiredState(
      {
        tasks: [
          { name: "a", enabled: true, cron: "* * * * *" },
          { name: "a", enabled: false, cron: "* * * * *" },
        ],
      },
      options,
    );
    expect(state.tasks).toEqual([]);
    expect(state.rejected).toEqual([
      expect.objectContaining({
        index: 0,
        name: "a",
        field: "name",
        reason: expect.stringContaining("appears 2 times"),
      }),
      expect.objectContaining({ index: 1, name: "a", field: "name" }),
    ]);
  });

  it("names every problem of an entry: dependency fields beside the schedule and policy fields", () => {
    const state = parseDesiredState(
      {
        tasks: [
          // a bad waitAtMost used to hide the jitter's problems
          { name: "down", enabled: true, after: ["up"], waitAtMost: "soon", jitter: "banana" },
          // no schedule and a stray when, the schema's own problem beside them
          { name: "stray", enabled: true, colour: "red", when: "allSucceeded" },
          { name: "bare", enabled: true, waitAtMost: "3h", jitter: "banana" },
          { name: "up", enabled: true, cron: "0 * * * *" },
        ],
      },
      options,
    );
    const fields = (index: number) =>
      (state.rejected.find((entry) => entry.index === index)?.problems ?? []).map((problem) => problem.field);
    expect(state.tasks.map((task) => task.name)).toEqual(["up"]);
    expect(state.rejected[0]).toMatchObject({ index: 0, field: "waitAtMost", value: "soon" });
    expect(fields(0)).toEqual(["waitAtMost", "jitter", "jitter"]);
    expect(fields(1)).toEqual(["(entry)", "cron", "when"]);
    expect(state.rejected[2]).toMatchObject({ index: 2, field: "cron", value: undefined });
    expect(fields(2)).toEqual(["cron", "waitAtMost", "jitter"]);
  });

  it("refuses an empty task list unless the document confirms it means to disable every task", () => {
    expect(() => parseDesiredState({ tasks: [] }, options)).toThrow(
      'config from file tasks.yaml has an empty "tasks" list, which would disable every task; if that is meant, add "confirmDisableAll": true to the document',
    );
    expect(parseDesiredState({ tasks: [], confirmDisableAll: true }, options).tasks).toEqual([]);
  });

  it.each([
    [null, "the document is empty"],
    [[], "the document is a list"],
    [{ jobs: [] }, 'it has no "tasks" key'],
    [{ tasks: {} }, '"tasks" is not a list'],
  ])("refuses a whole document that is not a desired state: %j", (document, why) => {
    expect(() => parseDesiredState(document, options)).toThrow(why);
  });
});

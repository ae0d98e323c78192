import { describe, expect, it } from "vitest";
import { parseDesiredState } from "../../src/config/desiredState.js";
import { EntryMemo } from "../../src/config/entryMemo.js";

const options = {
  defaultTimezone: "UTC",
  rules: { minIntervalMs: 60_000 },
  now: new Date("2026-03-01T00:00:00Z"),
  source: "test",
  revision: "r",
};

const entries = () => [
  { name: "a", enabled: true, cron: "0 9 * * *" },
  { name: "b", enabled: true, every: "15m", catchUp: { window: "1h", runs: "latest" } },
  { name: "c", enabled: true, after: ["a"] },
  { name: "d", enabled: true, cron: "0 9 * * *", exclude: "holidays" },
  { name: "bad", enabled: true, cron: "61 * * * *" },
];
const document = (tasks: unknown[]) => ({
  tasks,
  calendars: { holidays: { dates: ["2026-12-25"] } },
});

describe("EntryMemo: a ConfigWatcher's unchanged entries are not validated again (src/config/entryMemo.ts)", () => {
  it("the state parsed with the memo is the state parsed without it, document after document", () => {
    const memo = new EntryMemo();
    const edited = entries();
    edited[0] = { name: "a", enabled: false, cron: "0 8 * * *" };
    for (const tasks of [entries(), entries(), edited, [...edited].reverse(), edited]) {
      const withMemo = parseDesiredState(document(tasks), { ...options, memo });
      const without = parseDesiredState(document(tasks), options);
      expect(withMemo).toEqual(without);
    }
  });

  it("an equal entry at the same place becomes the same task again; an edited one, an excluding one or a refused one is read again", () => {
    const memo = new EntryMemo();
    const first = parseDesiredState(document(entries()), { ...options, memo });
    const edited = entries();
    edited[1] = { name: "b", enabled: true, every: "30m", catchUp: { window: "1h", runs: "latest" } };
    const second = parseDesiredState(document(edited), { ...options, memo });
    const byName = (state: typeof first, name: string) => state.tasks.find((task) => task.name === name);
    expect(byName(second, "a")).toBe(byName(first, "a"));
    expect(byName(second, "b")).not.toBe(byName(first, "b"));
    expect(byName(second, "b")?.cron).toBe("30 minutes");
    expect(byName(second, "d")).not.toBe(byName(first, "d"));
    expect(second.rejected.map((entry) => entry.name)).toEqual(["bad"]);
    // a reused answer is kept for the next document too, not only a freshly read one
    const again = parseDesiredState(document(edited), { ...options, memo });
    expect(byName(again, "a")).toBe(byName(first, "a"));
    expect(byName(again, "b")).toBe(byName(second, "b"));
    // other rules: nothing is reused
    const third = parseDesiredState(document(edited), { ...options, rules: { minIntervalMs: 1_000 }, memo });
    expect(byName(third, "a")).not.toBe(byName(second, "a"));
    expect(byName(third, "a")).toEqual(byName(second, "a"));
  });
});

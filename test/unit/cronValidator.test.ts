import { createRequire } from "node:module";
import { CronExpressionParser } from "cron-parser";
import { describe, expect, it, vi } from "vitest";
import { checkSchedule, nextRunTimes } from "../../src/config/cronValidator.js";

const now = new Date("2026-03-01T00:00:00Z");
const minute = { minIntervalMs: 60_000 };

function rejection(cron: string, timezone = "UTC", rules = minute) {
  const result = checkSchedule(cron, timezone, rules, now);
  if (result.ok) throw new Error(`expected ${cron} to be rejected`);
  return result;
}

describe("CronValidator", () => {
  it("validates with the very cron-parser Agenda resolves", () => {
    const require = createRequire(import.meta.url);
    const ours = require.resolve("cron-parser");
    const agendas = createRequire(require.resolve("agenda")).resolve("cron-parser");
    expect(agendas).toBe(ours);
    const version = (require("cron-parser/package.json") as { version: string }).version;
    expect(version).toBe(
      (require("../../package.json") as { dependencies: Record<string, string> }).dependencies["cron-parser"],
    );
  });

  it.each([
    ["*/5 * * * *", "UTC"],
    ["0 */5 * * * *", "Asia/Shanghai"],
    ["0 9 * * MON-FRI", "Europe/Berlin"],
    ["30 2 1 * *", "America/New_York"],
    ["@daily", "UTC"],
    ["0 0 * * THU", "UTC"],
  ])("accepts %s in %s", (cron, timezone) => {
    expect(checkSchedule(cron, timezone, minute, now)).toMatchObject({ ok: true, timezone });
  });

  it("refuses steps beyond the field's range that cron-parser accepts silently", () => {
    expect(() => CronExpressionParser.parse("*/61 * * * *")).not.toThrow(); // the trap
    expect(rejection("*/61 * * * *")).toEqual({
      ok: false,
      field: "cron",
      value: "*/61 * * * *",
      reason: 'minute field "*/61": step 61 is outside 1-59',
    });
    expect(rejection("0 0 */25 * * *").reason).toBe('hour field "*/25": step 25 is outside 1-23');
  });

  it.each([
    ["61 * * * *", 'minute field "61": value 61 is outside 0-59'],
    ["* 24 * * *", 'hour field "24": value 24 is outside 0-23'],
    ["* * 0 * *", 'day of month field "0": value 0 is outside 1-31'],
    ["* * * 13 *", 'month field "13": value 13 is outside 1-12'],
    ["60 * * * * *", 'second field "60": value 60 is outside 0-59'],
    ["* * * *", "has 4 fields; use 5 (minute hour day-of-month month day-of-week) or 6 (with seconds first)"],
    [
      "* * * * * * *",
      "has 7 fields; use 5 (minute hour day-of-month month day-of-week) or 6 (with seconds first)",
    ],
    [
      "H * * * *",
      'minute field "H": "H" (hashed value) is not supported: its value is not stable across restarts',
    ],
    ["1,,2 * * * *", 'minute field "1,,2": has an empty list item'],
    [
      "@every 5m",
      'unknown alias "@every 5m"; use one of @yearly, @annually, @monthly, @weekly, @daily, @hourly or a 5- or 6-field expression',
    ],
  ])("refuses %s, naming field, value and reason", (cron, reason) => {
    expect(rejection(cron)).toMatchObject({ field: "cron", value: cron, reason });
  });

  it("passes on cron-parser's own refusals", () => {
    expect(rejection("5-2 * * * *").reason).toMatch(/Invalid range: 5-2/);
    expect(rejection("0 0 30 2 *").reason).toMatch(/day of month/i);
  });

  it("refuses unknown timezones and UTC offsets", () => {
    expect(rejection("* * * * *", "Mars/Olympus")).toMatchObject({
      field: "timezone",
      value: "Mars/Olympus",
    });
    expect(rejection("* * * * *", "+08:00")).toMatchObject({ field: "timezone", value: "+08:00" });
  });

  it("refuses schedules finer than the minimum interval, and accepts them when it is lowered", () => {
    expect(rejection("*/30 * * * * *").reason).toBe(
      "fires every 30 s at its most frequent, more often than the minimum interval of 1 min",
    );
    // the gap that only shows at the hour's wrap (59 -> 0) counts too
    expect(rejection("0,59 * * * *", "UTC", { minIntervalMs: 120_000 }).reason).toMatch(/^fires every 1 min/);
    expect(checkSchedule("0,59 * * * *", "UTC", minute, now).ok).toBe(true);
    expect(checkSchedule("*/2 * * * * *", "UTC", { minIntervalMs: 2000 }, now)).toMatchObject({
      ok: true,
      shortestGapMs: 2000,
    });
  });

  it("answers an expression checked before without parsing it again, unless sampling from `now` decided", () => {
    const parse = vi.spyOn(CronExpressionParser, "parse");
    try {
      const first = checkSchedule("7 3 * * *", "Europe/Berlin", minute, now);
      expect(first.ok).toBe(true);
      const parses = parse.mock.calls.length;
      expect(checkSchedule("7 3 * * *", "Europe/Berlin", minute, new Date("2026-10-25T00:00:00Z"))).toBe(
        first,
      );
      expect(parse.mock.calls.length).toBe(parses);
      // another timezone or minimum interval is another question
      expect(checkSchedule("7 3 * * *", "UTC", minute, now)).not.toBe(first);
      expect(checkSchedule("7 3 * * *", "Europe/Berlin", { minIntervalMs: 120_000 }, now)).not.toBe(first);
      // the field bound (1 h) is under the limit, so occurrences from `now` are sampled (a DST change
      // in the sample can move the shortest gap): asked again, it samples again
      const rules = { minIntervalMs: 90 * 60_000 };
      expect(checkSchedule("0 1,3 * * *", "UTC", rules, now)).toMatchObject({
        ok: true,
        shortestGapMs: 2 * 3_600_000,
      });
      const sampledParses = parse.mock.calls.length;
      checkSchedule("0 1,3 * * *", "UTC", rules, now);
      expect(parse.mock.calls.length).toBe(sampledParses + 1);
    } finally {
      parse.mockRestore();
    }
  });

  it("computes next runs in the task's timezone", () => {
    const [first] = nextRunTimes("0 9 * * *", "Asia/Shanghai", now, 1);
    expect(first?.toISOString()).toBe("2026-03-01T01:00:00.000Z");
  });
});

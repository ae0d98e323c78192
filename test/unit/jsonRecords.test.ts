import { describe, expect, it } from "vitest";
import { jsonRecords, jsonTime } from "../../src/engine/sql/tables.js";

/** The batched statements' rows as one JSON parameter (src/engine/sql/tables.ts). */
describe("jsonRecords", () => {
  it("is the rows' JSON, dates as ISO strings and nested objects kept as JSON", () => {
    const at = new Date("2026-12-03T14:00:00.123Z");
    const json = jsonRecords([{ id: "a", at, meta: { slot: at, n: 1 }, none: null }]);
    expect(JSON.parse(json)).toEqual([
      {
        id: "a",
        at: "2026-12-03T14:00:00.123Z",
        meta: { slot: "2026-12-03T14:00:00.123Z", n: 1 },
        none: null,
      },
    ]);
  });

  it("replaces a NUL, which PostgreSQL text cannot hold, in any string, and keeps the text \\u0000 as written", () => {
    const rows = [
      { error: "bad\u0000byte", meta: { detail: ["x\u0000y"] } },
      { error: "a literal \\u0000 in a message" },
    ];
    expect(JSON.parse(jsonRecords(rows))).toEqual([
      { error: "bad\uFFFDbyte", meta: { detail: ["x\uFFFDy"] } },
      { error: "a literal \\u0000 in a message" },
    ]);
  });

  it("replaces a lone surrogate, which PostgreSQL's JSON input refuses, and keeps a pair", () => {
    // a message cut in the middle of an emoji; "😀" is the pair \ud83d\ude00
    const rows = [{ error: "cut \ud83d", meta: { detail: ["\ude00 alone", "whole 😀"] } }];
    expect(JSON.parse(jsonRecords(rows))).toEqual([
      { error: "cut \uFFFD", meta: { detail: ["\uFFFD alone", "whole 😀"] } },
    ]);
  });

  it("takes times as ISO text made beforehand, as the Date's own JSON would be", () => {
    const at = new Date("2026-12-05T12:00:00.007Z");
    expect(jsonTime(at)).toBe(JSON.parse(JSON.stringify(at)));
    expect(jsonTime(new Date(Number.NaN))).toBe(JSON.parse(JSON.stringify(new Date(Number.NaN))));
    expect(jsonTime(null)).toBeNull();
    expect(jsonTime(undefined)).toBeNull();
    expect(jsonTime("2026-12-05T12:00:00.000Z")).toBe("2026-12-05T12:00:00.000Z");
  });
});

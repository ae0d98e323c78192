import { describe, expect, it } from "vitest";
import { isoTime } from "../../src/core/isoTime.js";

/** src/core/isoTime.ts writes what Date.prototype.toISOString writes, for every time. */

const native = (ms: number) => new Date(ms).toISOString();

describe("isoTime", () => {
  it("writes the same text as toISOString at the edges of its range and of days, months and leap years", () => {
    const times = [
      0,
      -1,
      1,
      Date.UTC(1969, 11, 31, 23, 59, 59, 999),
      Date.UTC(2000, 1, 29, 12, 0, 0, 5),
      Date.UTC(1900, 1, 28, 23, 59, 59, 999),
      Date.UTC(1900, 2, 1),
      Date.UTC(2024, 1, 29),
      Date.UTC(2026, 11, 31, 23, 59, 59, 999),
      Date.UTC(2027, 0, 1),
      Date.UTC(999, 0, 1), // a three-digit year is written with four
      new Date(Date.UTC(2000, 5, 6, 7, 8, 9, 10)).setUTCFullYear(9), // 0009-06-06
      -62_167_219_200_000, // 0000-01-01T00:00:00.000Z
      -62_167_219_200_001, // the year -1: toISOString's own signed form
      253_402_300_799_999, // 9999-12-31T23:59:59.999Z
      253_402_300_800_000, // +010000-01-01
      8.64e15, // the last time a Date holds
      -8.64e15,
    ];
    for (const ms of times) {
      expect(isoTime(ms)).toBe(native(ms));
      expect(isoTime(new Date(ms))).toBe(native(ms));
    }
  });

  it("writes the same text as toISOString for random times over ±10,000 years", () => {
    let state = 20261206;
    const random = () => {
      state = (state * 1_103_515_245 + 12_345) % 2_147_483_648;
      return state / 2_147_483_648;
    };
    for (let i = 0; i < 50_000; i++) {
      const ms = Math.floor((random() * 2 - 1) * 3.2e14);
      expect(isoTime(ms)).toBe(native(ms));
    }
  });

  it("takes a fractional number as a Date takes it, and answers a cached slot's time, not another's", () => {
    expect(isoTime(1_796_528_890_588.9)).toBe(native(1_796_528_890_588));
    expect(isoTime(-0.5)).toBe(native(0));
    // times 64 ms apart share a cache slot
    const first = Date.UTC(2026, 11, 6, 3, 49, 1, 0);
    for (const ms of [first, first + 64, first, first + 128, first + 64 * 1024])
      expect(isoTime(ms)).toBe(native(ms));
  });

  it("throws for an invalid date, as toISOString does", () => {
    expect(() => isoTime(new Date(Number.NaN))).toThrow(RangeError);
    expect(() => isoTime(Number.NaN)).toThrow(RangeError);
  });
});

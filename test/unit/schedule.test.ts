import { describe, expect, it } from "vitest";
import {
  nextSlot,
  nextSlots,
  scheduleOf,
  slotsBetween,
  storedEvery,
} from "../../src/core/policies/schedule.js";

describe("every: intervals", () => {
  it.each([
    [90_000, "90 seconds"],
    [60_000, "1 minute"],
    [900_000, "15 minutes"],
    [21_600_000, "6 hours"],
    [86_400_000, "1 day"],
    [2 * 86_400_000, "2 days"],
  ])("%i ms is stored as %s and read back", (ms, stored) => {
    expect(storedEvery(ms)).toBe(stored);
    expect(scheduleOf(stored)).toEqual({ kind: "every", everyMs: ms });
  });

  it("a cron expression is not taken for an interval", () => {
    expect(scheduleOf("*/15 * * * *")).toEqual({ kind: "cron", cron: "*/15 * * * *" });
    expect(scheduleOf("@daily")).toEqual({ kind: "cron", cron: "@daily" });
  });

  it("slots are anchored to the Unix epoch (fixed rate), whatever the timezone or the last run", () => {
    const after = Date.parse("2026-12-01T03:07:12.345Z");
    expect(new Date(nextSlot("15 minutes", "Asia/Kolkata", after) ?? 0).toISOString()).toBe(
      "2026-12-01T03:15:00.000Z",
    );
    expect(
      nextSlots("90 seconds", "UTC", Date.parse("2026-12-01T00:00:00Z"), 3).map((t) =>
        new Date(t).toISOString(),
      ),
    ).toEqual(["2026-12-01T00:01:30.000Z", "2026-12-01T00:03:00.000Z", "2026-12-01T00:04:30.000Z"]);
    expect(slotsBetween("1 day", "UTC", 0, 3 * 86_400_000, 10)).toEqual({
      slots: [0, 86_400_000, 172_800_000, 259_200_000],
      complete: true,
    });
  });
});

describe("at: one-shots", () => {
  it("has one slot, its time, and no next slot after it", () => {
    const at = Date.parse("2026-12-01T03:00:00Z");
    expect(scheduleOf("at 2026-12-01T03:00:00.000Z")).toEqual({ kind: "at", at });
    expect(nextSlot("at 2026-12-01T03:00:00.000Z", "UTC", at - 1)).toBe(at);
    expect(nextSlot("at 2026-12-01T03:00:00.000Z", "UTC", at)).toBeUndefined();
    expect(slotsBetween("at 2026-12-01T03:00:00.000Z", "UTC", at - 10, at + 10, 5)).toEqual({
      slots: [at],
      complete: true,
    });
  });
});

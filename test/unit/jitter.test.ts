import { describe, expect, it } from "vitest";
import { planRunStart } from "../../src/core/policies/catchUpAtStart.js";
import { dueAt, jitterOffset, slotOfDue } from "../../src/core/policies/jitter.js";

describe("jitter", () => {
  const slot = Date.parse("2026-12-01T03:00:00Z");

  it("is stable for a task and a slot, in [0, jitter), and spreads a herd", () => {
    expect(jitterOffset("report", slot, 30_000)).toBe(jitterOffset("report", slot, 30_000));
    const offsets = Array.from({ length: 200 }, (_, i) => jitterOffset(`task-${i}`, slot, 30_000));
    for (const offset of offsets) {
      expect(offset).toBeGreaterThanOrEqual(0);
      expect(offset).toBeLessThan(30_000);
    }
    // 200 tasks on one cron: spread over the whole jitter, not bunched
    expect(new Set(offsets.map((offset) => Math.floor(offset / 3_000))).size).toBe(10);
    expect(jitterOffset("report", slot, 0)).toBe(0);
  });

  it("a due time maps back to its slot", () => {
    const due = dueAt("report", slot, 30_000);
    expect(slotOfDue("report", due, 30_000, [slot])).toBe(slot);
    expect(slotOfDue("report", slot + 1, 30_000, [slot])).toBeUndefined();
  });

  it("the start plan runs the slot (not its due time) and writes the next slot plus its offset", () => {
    const jitterMs = 30_000;
    const due = dueAt("report", slot, jitterMs);
    const plan = planRunStart({
      taskName: "report",
      cron: "0 * * * *",
      timezone: "UTC",
      data: { policy: { jitterMs } },
      storedSlot: new Date(due),
      now: new Date(due + 50),
      graceMs: 60_000,
      previousRunEndedAt: null,
      rerunOrManual: false,
    });
    expect(plan?.slot.getTime()).toBe(slot);
    expect(plan?.decision.kind).toBe("on-time");
    expect(plan?.nextRunAt?.getTime()).toBe(dueAt("report", slot + 3_600_000, jitterMs));
  });

  it("a timezone this runtime does not know leaves the start to Agenda's computation", () => {
    const input = {
      taskName: "report",
      cron: "0 * * * *",
      data: {},
      storedSlot: new Date(slot),
      now: new Date(slot + 50),
      graceMs: 60_000,
      previousRunEndedAt: null,
      rerunOrManual: false,
    };
    expect(planRunStart({ ...input, timezone: "Mars/Olympus_Mons" })).toBeUndefined();
    expect(planRunStart({ ...input, timezone: "Asia/Shanghai" })?.nextRunAt?.getTime()).toBe(
      slot + 3_600_000,
    );
  });
});

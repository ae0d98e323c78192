import { describe, expect, it } from "vitest";
import type { SlotSource } from "../../src/core/policies/catchUp.js";
import { cancelAt, decideOverlapAtEnd } from "../../src/core/policies/overlap.js";

const second = 1_000;
const everySecond: SlotSource = {
  between(from, to, limit) {
    const slots: number[] = [];
    for (let slot = Math.ceil(from / second) * second; slot <= to; slot += second) {
      if (slots.length >= limit) return { slots, complete: false };
      slots.push(slot);
    }
    return { slots, complete: true };
  },
  newestAtOrBefore: (time) => Math.floor(time / second) * second,
};
// a run started at 10.2 s, its pending slot 11 s, it ended at 13.5 s
const input = { runStartedAt: 10_200, now: 13_500, pendingSlot: 11_000, schedule: everySecond };

describe("decideOverlapAtEnd", () => {
  it("skip: every slot that fell due during the run is skipped; the next is the first after the end", () => {
    expect(decideOverlapAtEnd({ ...input, policy: "skip" })).toMatchObject({
      skipped: [11_000, 12_000, 13_000],
      skippedCount: 3,
      nextAfter: 13_500,
    });
  });

  it("queueOne: the first of them runs at once, the others are skipped", () => {
    expect(decideOverlapAtEnd({ ...input, policy: "queueOne" })).toMatchObject({
      skipped: [12_000, 13_000],
      nextAfter: undefined,
    });
  });

  it("cancelRunning: the run was cut at the pending slot, which runs next", () => {
    expect(decideOverlapAtEnd({ ...input, now: 11_050, policy: "cancelRunning" })).toMatchObject({
      skipped: [],
      nextAfter: undefined,
    });
    expect(cancelAt("cancelRunning", 10_200, 11_000)).toBe(11_000);
    expect(cancelAt("skip", 10_200, 11_000)).toBeUndefined();
  });

  it("nothing to decide when no slot fell due during the run, or the pending one was owed before it (catchUp: all)", () => {
    expect(decideOverlapAtEnd({ ...input, now: 10_900, policy: "skip" })).toBeUndefined();
    expect(decideOverlapAtEnd({ ...input, pendingSlot: 9_000, policy: "skip" })).toBeUndefined();
    expect(decideOverlapAtEnd({ ...input, pendingSlot: null, policy: "skip" })).toBeUndefined();
  });
});

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

  it("a pending slot that fell due during a slow start save runs at the end; the slots after it are the policy's", () => {
    // start save at 10_200 computed the pending 11_000; the handler began at 11_400 and ran to 13_500
    const slow = { ...input, runStartedAt: 10_200, handlerStartedAt: 11_400 };
    expect(decideOverlapAtEnd({ ...slow, policy: "skip" })).toMatchObject({
      skipped: [12_000, 13_000],
      nextAfter: undefined,
    });
    expect(decideOverlapAtEnd({ ...slow, policy: "queueOne" })).toMatchObject({
      skipped: [12_000, 13_000],
      nextAfter: undefined,
    });
    // a short run after the slow save: the pending slot just runs, nothing is recorded
    expect(decideOverlapAtEnd({ ...slow, now: 11_600, policy: "skip" })).toBeUndefined();
    // a quick save: the same run decides as before
    expect(decideOverlapAtEnd({ ...input, handlerStartedAt: 10_201, policy: "skip" })).toMatchObject({
      skipped: [11_000, 12_000, 13_000],
      nextAfter: 13_500,
    });
  });

  it("nothing to decide when no slot fell due during the run, or the pending one was owed before it (catchUp: all)", () => {
    expect(decideOverlapAtEnd({ ...input, now: 10_900, policy: "skip" })).toBeUndefined();
    expect(decideOverlapAtEnd({ ...input, pendingSlot: 9_000, policy: "skip" })).toBeUndefined();
    expect(decideOverlapAtEnd({ ...input, pendingSlot: null, policy: "skip" })).toBeUndefined();
  });
});

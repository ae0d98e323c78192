import { describe, expect, it } from "vitest";
import type { SlotSource } from "../../src/core/policies/catchUp.js";
import {
  cancelAt,
  decideOverlapAtEnd,
  type OverlapInput,
  type OverlapPolicy,
} from "../../src/core/policies/overlap.js";

/** A schedule with a slot every `period` ms from 0. */
function every(period: number): SlotSource {
  return {
    between(from, to, limit) {
      const slots: number[] = [];
      for (let slot = Math.ceil(from / period) * period; slot <= to; slot += period) {
        if (slots.length >= limit) return { slots, complete: false };
        slots.push(slot);
      }
      return { slots, complete: true };
    },
    newestAtOrBefore: (time) => Math.floor(time / period) * period,
  };
}

const second = 1_000;
const everySecond = every(second);
const everyTenSeconds = every(10 * second);
const POLICIES: OverlapPolicy[] = ["skip", "queueOne", "cancelRunning"];
// a run of the slot 10 s, started on time (start save at 10.2 s), its pending slot 11 s, it ended at 13.5 s
const input = {
  runStartedAt: 10_200,
  handlerStartedAt: 10_200,
  slotDueAt: 10_000,
  now: 13_500,
  pendingSlot: 11_000,
  schedule: everySecond,
};

describe("decideOverlapAtEnd: a run that started on time and outlasted its interval", () => {
  it("skip: every slot that fell due during the run is skipped; the next is the first after the end", () => {
    expect(decideOverlapAtEnd({ ...input, policy: "skip" })).toMatchObject({
      skipped: [11_000, 12_000, 13_000],
      skippedCount: 3,
      runs: null,
      nextAfter: 13_500,
    });
  });

  it("queueOne: the newest of them runs at once, the older ones are skipped", () => {
    expect(decideOverlapAtEnd({ ...input, policy: "queueOne" })).toMatchObject({
      skipped: [11_000, 12_000],
      runs: 13_000,
      nextAfter: undefined,
    });
  });

  it("cancelRunning: the run was cut at the pending slot, which runs next; a handler that ignored its signal: the newest runs", () => {
    expect(decideOverlapAtEnd({ ...input, now: 11_050, policy: "cancelRunning" })).toBeUndefined();
    expect(decideOverlapAtEnd({ ...input, policy: "cancelRunning" })).toMatchObject({
      skipped: [11_000, 12_000],
      runs: 13_000,
    });
    expect(cancelAt("cancelRunning", 10_200, 11_000)).toBe(11_000);
    expect(cancelAt("skip", 10_200, 11_000)).toBeUndefined();
  });

  it("nothing to decide when no slot fell due during the run, or the pending one was owed before it (catchUp: all)", () => {
    expect(decideOverlapAtEnd({ ...input, now: 10_900, policy: "skip" })).toBeUndefined();
    expect(decideOverlapAtEnd({ ...input, pendingSlot: 9_000, policy: "skip" })).toBeUndefined();
    expect(decideOverlapAtEnd({ ...input, pendingSlot: null, policy: "skip" })).toBeUndefined();
  });

  it("without the slot's due time the run counts as started on time", () => {
    const { slotDueAt: _, ...unknownDue } = input;
    expect(decideOverlapAtEnd({ ...unknownDue, handlerStartedAt: 11_400, policy: "skip" })).toMatchObject({
      skipped: [11_000, 12_000, 13_000],
      runs: null,
    });
  });
});

describe("decideOverlapAtEnd: never an older slot run after a newer one recorded skipped", () => {
  it("a stalled event loop: slot :48 ran late, :49 and :50 fell due; nothing is recorded, :49 runs next", () => {
    // claimed ahead: start save at 46.5 s (lastRunAt: the due time 48 s), pending 49 s; the loop
    // stalled, the handler began at 49.3 s and ended at 50.2 s. On time it would have ended at
    // 48.9 s: :49 and :50 are owed (the catch-up at :49's start runs :50 after it)
    const stalled = {
      runStartedAt: 48_000,
      handlerStartedAt: 49_300,
      slotDueAt: 48_000,
      now: 50_200,
      pendingSlot: 49_000,
      schedule: everySecond,
    };
    for (const policy of POLICIES) expect(decideOverlapAtEnd({ ...stalled, policy }), policy).toBeUndefined();
    // the pending slot already moved past :49: :49 is still owed, and runs before :50
    expect(decideOverlapAtEnd({ ...stalled, pendingSlot: 50_000, policy: "skip" })).toBeUndefined();
  });

  it("a slow start save: the slots the run overlapped on time are the policy's, the later ones owed", () => {
    // start save at 10.2 s computed the pending 11 s; the handler began at 11.4 s and ran to 13.5 s:
    // on time it would have ended at 12.1 s, overlapping 11 s and 12 s; 13 s is owed
    const slow = { ...input, handlerStartedAt: 11_400 };
    expect(decideOverlapAtEnd({ ...slow, policy: "skip" })).toMatchObject({
      skipped: [11_000, 12_000],
      runs: 13_000,
    });
    for (const policy of ["queueOne", "cancelRunning"] as const)
      expect(decideOverlapAtEnd({ ...slow, policy }), policy).toMatchObject({
        skipped: [11_000],
        runs: 12_000,
      });
    // a short run after the slow save: the pending slot just runs, nothing is recorded
    expect(decideOverlapAtEnd({ ...slow, now: 11_600, policy: "skip" })).toBeUndefined();
  });

  it("holds for every policy, lateness and duration: every skipped slot is older than the one that runs next", () => {
    for (const policy of POLICIES)
      for (const lateMs of [0, 300, 999, 1_000, 2_500, 7_000])
        for (const durationMs of [100, 900, 1_000, 1_700, 3_200, 9_999]) {
          const handlerStartedAt = 10_000 + lateMs;
          const now = handlerStartedAt + durationMs;
          const decision = decideOverlapAtEnd({
            policy,
            runStartedAt: 10_000,
            handlerStartedAt,
            slotDueAt: 10_000,
            now,
            pendingSlot: 11_000,
            schedule: everySecond,
          });
          const due = everySecond.between(11_000, now, 100).slots;
          const label = `${policy}, ${lateMs} ms late, ${durationMs} ms`;
          const recorded = decision?.skipped ?? [];
          const runs = decision === undefined ? (due.length > 0 ? 11_000 : null) : decision.runs;
          // the slots a run on time would have overlapped (its end: the slot plus the duration)
          const overlapped = due.filter((slot) => slot <= 10_000 + durationMs);
          if (runs === null) expect(recorded, label).toEqual(due);
          else {
            // skipped: only overlapped slots, all older than the one that runs; the rest run in order
            expect(
              recorded.every((slot) => slot < runs && overlapped.includes(slot)),
              label,
            ).toBe(true);
            expect(
              due.filter((slot) => slot >= runs),
              label,
            ).toEqual(due.filter((slot) => !recorded.includes(slot)));
          }
          // a slot no run on time would have overlapped is never recorded skipped
          expect(
            recorded.filter((slot) => !overlapped.includes(slot)),
            label,
          ).toEqual([]);
        }
  });
});

describe("decideOverlapAtEnd: a run that took its slot late is not 'the previous run still going'", () => {
  // every 10 s, handlers of 4 s: shorter than their interval
  const tenSeconds = { schedule: everyTenSeconds, slotDueAt: 10_000, pendingSlot: 20_000 };

  it("a hand-off re-run that ends after the next slot: that slot runs, once, nothing is recorded skipped", () => {
    // cut off at 13 s, re-run from 16.5 s to 20.5 s (start save at 16.5 s: pending 20 s)
    const rerun = {
      ...tenSeconds,
      runStartedAt: 16_500,
      handlerStartedAt: 16_500,
      now: 20_500,
      rerunOf: { slot: 10_000 },
    };
    for (const policy of POLICIES) expect(decideOverlapAtEnd({ ...rerun, policy }), policy).toBeUndefined();
  });

  it("a run that waited for a worker behaves the same: the next slot is not skipped", () => {
    const waited = { ...tenSeconds, runStartedAt: 10_000, handlerStartedAt: 17_000, now: 21_000 };
    expect(decideOverlapAtEnd({ ...waited, policy: "skip" })).toBeUndefined();
    // the same 4 s run started on time and still going at the next slot would have been the policy's
    expect(
      decideOverlapAtEnd({ ...waited, handlerStartedAt: 10_000, now: 21_000, policy: "skip" }),
    ).toMatchObject({ skipped: [20_000], runs: null, nextAfter: 21_000 });
  });

  it("a re-run that starts after the next slot: the slots since its own are owed, the oldest runs next", () => {
    const late = { ...tenSeconds, runStartedAt: 27_000, handlerStartedAt: 27_000, rerunOf: { slot: 10_000 } };
    // still going at 30 s (its start save computed 30 s): 20 s runs after it, then 30 s; none recorded
    expect(decideOverlapAtEnd({ ...late, pendingSlot: 30_000, now: 31_000, policy: "skip" })).toMatchObject({
      skipped: [],
      runs: 20_000,
    });
    // over before 30 s: 20 s, due before the re-run began, runs after it (30 s follows as usual)
    expect(decideOverlapAtEnd({ ...late, pendingSlot: 30_000, now: 29_000, policy: "skip" })).toMatchObject({
      skipped: [],
      runs: 20_000,
    });
  });

  it("a late run that also outlasts its interval: the slots it would have overlapped on time are the policy's", () => {
    // due at 0, began at 5 s: had it started on time, a 12 s run would have ended at 12 s (10 s overlapped)
    const lateAndLong = {
      policy: "skip" as const,
      runStartedAt: 0,
      handlerStartedAt: 5_000,
      slotDueAt: 0,
      pendingSlot: 10_000,
      schedule: everyTenSeconds,
    };
    expect(decideOverlapAtEnd({ ...lateAndLong, now: 17_000 })).toMatchObject({
      skipped: [10_000],
      runs: null,
      nextAfter: 17_000,
    });
    // an 18 s run: 20 s would have been free on time; it runs now, 10 s is recorded, as the policy's
    const decision = decideOverlapAtEnd({ ...lateAndLong, now: 23_000 });
    expect(decision).toMatchObject({ skipped: [10_000], runs: 20_000 });
    expect(decision?.reason).toMatch(/overlap is skip/);
  });
});

describe("decideOverlapAtEnd: counts", () => {
  it("lists at most 100 skipped slots and counts the rest", () => {
    const long: OverlapInput = { ...input, policy: "skip", now: 10_500 + 500 * second };
    const decision = decideOverlapAtEnd(long);
    expect(decision?.skipped).toHaveLength(100);
    expect(decision).toMatchObject({ skippedCount: 500, atLeast: false, runs: null });
  });
});

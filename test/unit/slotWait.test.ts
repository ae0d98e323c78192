import { expect, it } from "vitest";
import { LAST_MS_BY_TURNS, PRE_WAKE_MS, slotWaitStep } from "../../src/engine/slotWait.js";

it("a wait from the start-ahead wakes once before the slot, then sets a timer for all but the last millisecond", () => {
  expect(PRE_WAKE_MS).toBe(50);
  expect(LAST_MS_BY_TURNS).toBe(1);
  expect(slotWaitStep(1_500)).toEqual({ timerMs: 1_450 });
  expect(slotWaitStep(52)).toEqual({ timerMs: 2 });
  // from the pre-wake on: one timer to the last millisecond
  expect(slotWaitStep(51)).toEqual({ timerMs: 50 });
  expect(slotWaitStep(50)).toEqual({ timerMs: 49 });
  expect(slotWaitStep(2)).toEqual({ timerMs: 1 });
});

it("the last millisecond is waited by loop turns, and a slot reached ends the wait", () => {
  expect(slotWaitStep(1)).toBe("turn");
  expect(slotWaitStep(0.4)).toBe("turn");
  expect(slotWaitStep(0)).toBe("done");
  expect(slotWaitStep(-30)).toBe("done");
});

it("following the steps from any distance reaches the slot without a timer past it", () => {
  for (const start of [1, 2, 7, 50, 51, 52, 60, 1_000, 8_000]) {
    let left = start;
    const timers: number[] = [];
    for (let step = slotWaitStep(left); step !== "done"; step = slotWaitStep(left)) {
      // a loop turn takes well under a millisecond; here each takes a whole one
      if (step === "turn") left -= 1;
      else {
        expect(step.timerMs).toBeGreaterThan(0);
        expect(step.timerMs).toBeLessThan(left);
        timers.push(step.timerMs);
        left -= step.timerMs;
      }
    }
    expect(timers.length).toBeLessThanOrEqual(2);
  }
});

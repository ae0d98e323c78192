import { describe, expect, it } from "vitest";
import {
  decidePause,
  errorSummary,
  type PauseInput,
  pauseOfData,
  storedPause,
  streakOfData,
  thresholdOf,
} from "../../src/core/policies/pauseOnFailure.js";

/** The pause-on-failure decision (docs/behaviour.md, "Pause on failure"), one slot's end at a time. */

const base: PauseInput = { threshold: 3, streak: 0, outcome: "failed", paused: false, disabled: false };

describe("decidePause", () => {
  it.each([
    ["a failed slot counts", { streak: 0 }, { streak: 1, pause: false }],
    ["the Nth failed slot in a row pauses", { streak: 2 }, { streak: 3, pause: true }],
    ["a succeeded slot resets the streak", { streak: 2, outcome: "succeeded" }, { streak: 0, pause: false }],
    [
      "a skipped slot neither counts nor breaks it",
      { streak: 2, outcome: "skipped" },
      { streak: 2, pause: false },
    ],
    [
      "an interrupted slot neither counts nor breaks it",
      { streak: 2, outcome: "interrupted" },
      { streak: 2, pause: false },
    ],
    [
      "without a threshold it never pauses",
      { streak: 50, threshold: undefined },
      { streak: 51, pause: false },
    ],
    ["already paused: no second pause", { streak: 3, paused: true }, { streak: 4, pause: false }],
    [
      "disabled (by the config) during the run: not paused",
      { streak: 2, disabled: true },
      { streak: 3, pause: false },
    ],
    ["threshold 1 pauses at the first failed slot", { streak: 0, threshold: 1 }, { streak: 1, pause: true }],
    [
      "a streak already past a lowered threshold pauses at the next failure",
      { streak: 7, threshold: 3 },
      { streak: 8, pause: true },
    ],
  ] as const)("%s", (_title, input, expected) => {
    expect(decidePause({ ...base, ...input })).toEqual(expected);
  });

  it("a run of outcomes: F F S(kipped) F pauses at the third failure; an S(ucceeded) in between starts over", () => {
    const run = (outcomes: PauseInput["outcome"][]) => {
      let streak = 0;
      const pauses: number[] = [];
      outcomes.forEach((outcome, index) => {
        const decision = decidePause({ ...base, streak, outcome, paused: pauses.length > 0 });
        streak = decision.streak;
        if (decision.pause) pauses.push(index);
      });
      return pauses;
    };
    expect(run(["failed", "failed", "skipped", "failed", "failed"])).toEqual([3]);
    expect(run(["failed", "failed", "succeeded", "failed", "failed"])).toEqual([]);
    expect(run(["failed", "failed", "succeeded", "failed", "failed", "failed"])).toEqual([5]);
  });
});

describe("the row's data", () => {
  it("reads the threshold, the streak and the pause mark; anything unreadable is absent", () => {
    expect([thresholdOf(3), thresholdOf(0), thresholdOf(1001), thresholdOf("3"), thresholdOf(null)]).toEqual([
      3,
      undefined,
      undefined,
      undefined,
      undefined,
    ]);
    expect([streakOfData({ failureStreak: 2 }), streakOfData({}), streakOfData(null)]).toEqual([2, 0, 0]);
    const mark = {
      at: new Date("2026-12-01T00:00:03Z"),
      failures: 3,
      slot: new Date("2026-12-01T00:00:03Z"),
      lastError: "boom",
    };
    expect(pauseOfData({ pausedByFailure: storedPause(mark) })).toEqual(mark);
    expect(pauseOfData({})).toBeUndefined();
  });

  it("keeps the first line of the error, at most 300 characters", () => {
    expect(errorSummary("first\nsecond")).toBe("first");
    expect(errorSummary(undefined)).toBeNull();
    expect(errorSummary("x".repeat(400))).toHaveLength(300);
  });
});

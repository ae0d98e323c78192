import { describe, expect, it } from "vitest";
import {
  CATCH_UP_ALL_CAP,
  type CatchUpPolicy,
  decideCatchUp,
  parseDuration,
  SKIPPED_LISTED_CAP,
  type SlotSource,
} from "../../src/core/policies/catchUp.js";
import { planRunStart } from "../../src/core/policies/catchUpAtStart.js";

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

const minute = 60_000;
const hour = 60 * minute;
const policy = (runs: CatchUpPolicy["runs"], windowMs = hour): CatchUpPolicy => ({ runs, windowMs });

describe("decideCatchUp", () => {
  it("a slot within the grace is on time under every policy; `all` continues from the slot", () => {
    for (const runs of ["none", "latest", "all"] as const) {
      const decision = decideCatchUp({
        policy: policy(runs),
        storedSlot: 10 * minute,
        now: 10 * minute + 30_000,
        graceMs: minute,
        schedule: every(minute),
      });
      expect(decision).toEqual({
        kind: "on-time",
        nextAfter: runs === "all" ? 10 * minute : 10 * minute + 30_000,
      });
    }
  });

  it("downtime over 5 missed slots (minute cron, back 5.5 min later, 1 h window)", () => {
    const input = {
      storedSlot: 10 * minute,
      now: 15 * minute + 30_000,
      graceMs: 10_000,
      schedule: every(minute),
    };
    const slots = [10, 11, 12, 13, 14, 15].map((m) => m * minute);

    const none = decideCatchUp({ ...input, policy: policy("none") });
    expect(none).toMatchObject({
      kind: "catch-up",
      run: null,
      skipped: slots,
      skippedCount: 6,
      nextAfter: input.now,
    });

    const latest = decideCatchUp({ ...input, policy: policy("latest") });
    expect(latest).toMatchObject({
      run: 15 * minute,
      skipped: slots.slice(0, 5),
      skippedCount: 5,
      nextAfter: input.now,
    });

    const all = decideCatchUp({ ...input, policy: policy("all") });
    expect(all).toMatchObject({ run: 10 * minute, skipped: [], skippedCount: 0, nextAfter: 10 * minute });
  });

  it("none still runs the newest slot when it is within the grace", () => {
    const decision = decideCatchUp({
      policy: policy("none"),
      storedSlot: 10 * minute,
      now: 15 * minute + 5_000,
      graceMs: 10_000,
      schedule: every(minute),
    });
    expect(decision).toMatchObject({ run: 15 * minute, skippedCount: 5 });
  });

  it("latest skips everything when the newest missed slot is older than the window (daily task re-enabled after a week)", () => {
    const day = 24 * hour;
    const decision = decideCatchUp({
      policy: policy("latest"),
      storedSlot: 2 * hour,
      now: 7 * day + 10 * hour,
      graceMs: minute,
      schedule: {
        ...every(day),
        newestAtOrBefore: (t) => Math.floor((t - 2 * hour) / day) * day + 2 * hour,
        between: (from, to, limit) => {
          const slots: number[] = [];
          for (let slot = 2 * hour; slot <= to; slot += day)
            if (slot >= from) {
              if (slots.length >= limit) return { slots, complete: false };
              slots.push(slot);
            }
          return { slots, complete: true };
        },
      },
    });
    expect(decision).toMatchObject({ kind: "catch-up", run: null, skippedCount: 8 });
    if (decision.kind !== "catch-up") throw new Error("expected a catch-up");
    expect(decision.reason).toMatch(/older than the catch-up window \(1h\)/);
  });

  it("all runs the slots within the window, oldest first, and skips the older ones", () => {
    const decision = decideCatchUp({
      policy: policy("all", 3 * minute),
      storedSlot: 10 * minute,
      now: 15 * minute + 30_000,
      graceMs: 10_000,
      schedule: every(minute),
    });
    // window 3 min: slots at 13, 14 and 15 min run; 10-12 are skipped
    expect(decision).toMatchObject({
      run: 13 * minute,
      skipped: [10, 11, 12].map((m) => m * minute),
      nextAfter: 13 * minute,
    });
  });

  it(`all is capped at the newest ${CATCH_UP_ALL_CAP} missed slots`, () => {
    const decision = decideCatchUp({
      policy: policy("all", 24 * hour),
      storedSlot: 0,
      now: 30 * minute,
      graceMs: 10_000,
      schedule: every(minute),
    });
    expect(decision).toMatchObject({
      run: (30 - CATCH_UP_ALL_CAP + 1) * minute,
      skippedCount: 30 - CATCH_UP_ALL_CAP + 1,
    });
    if (decision.kind !== "catch-up") throw new Error("expected a catch-up");
    expect(decision.reason).toMatch(/capped/);
  });

  it(`lists at most ${SKIPPED_LISTED_CAP} skipped slots and counts the rest`, () => {
    const decision = decideCatchUp({
      policy: policy("none"),
      storedSlot: 0,
      now: 7 * 24 * hour,
      graceMs: 10_000,
      schedule: every(minute),
    });
    if (decision.kind !== "catch-up") throw new Error("expected a catch-up");
    expect(decision.skipped).toHaveLength(SKIPPED_LISTED_CAP);
    expect(decision.skipped[0]).toBe(0);
    expect(decision.atLeast).toBe(true);
    expect(decision.skippedCount).toBe(10_000);
  });
});

describe("decideCatchUp: a stored slot that is no slot of the schedule", () => {
  it("is the newest missed slot when the schedule's own newest is older (a yearly cron back-dated by hand)", () => {
    const decision = decideCatchUp({
      policy: policy("latest"),
      storedSlot: 50 * minute,
      now: 60 * minute,
      graceMs: 1_000,
      schedule: every(24 * hour),
    });
    expect(decision).toMatchObject({ kind: "catch-up", run: 50 * minute, skippedCount: 0 });
  });
});

describe("decideCatchUp: slots that fell during the previous run", () => {
  it("lateness counts from the end of that run; the slots after the stored one are owed or recorded", () => {
    const input = {
      policy: policy("none"),
      storedSlot: 10 * minute,
      graceMs: 1_000,
      schedule: every(minute),
    };
    // the previous run, for slot 9, ended 500 ms ago, long after the slot: an ordinary late run;
    // 11 and 12 fell due while it went on, more than the grace ago: recorded, not run
    const slot9 = { ...input, previousRunSlot: 9 * minute };
    expect(
      decideCatchUp({ ...slot9, now: 13 * minute - 200, previousRunEndedAt: 13 * minute - 500 }),
    ).toMatchObject({ kind: "catch-up", run: 10 * minute, skipped: [11 * minute, 12 * minute] });
    // the same, and slot 13 fell due meanwhile: recorded too
    expect(
      decideCatchUp({ ...slot9, now: 13 * minute + 200, previousRunEndedAt: 13 * minute - 500 }),
    ).toMatchObject({ kind: "catch-up", run: 10 * minute, skipped: [11 * minute, 12 * minute, 13 * minute] });
    // a row from an older version (no previous slot): the slots up to the run's end count as decided
    expect(
      decideCatchUp({ ...input, now: 13 * minute + 200, previousRunEndedAt: 13 * minute - 500 }),
    ).toMatchObject({ kind: "catch-up", run: 10 * minute, skipped: [13 * minute] });
    // nothing ran for 2 min after it ended: missed
    expect(decideCatchUp({ ...input, now: 15 * minute, previousRunEndedAt: 13 * minute })).toMatchObject({
      kind: "catch-up",
    });
  });

  it("a stored slot moved back by hand owes nothing: the slots up to the previous run's ran", () => {
    // the previous run was for 30 s and ended at 31 s; the row was set back to 10 s by hand: it
    // runs (within the grace), 20 s and 30 s neither run again nor get a second record
    const moved = {
      policy: policy("latest"),
      storedSlot: 10_000,
      graceMs: 60_000,
      previousRunEndedAt: 31_000,
      previousRunSlot: 30_000,
      schedule: every(10_000),
    };
    expect(decideCatchUp({ ...moved, now: 31_050 })).toEqual({ kind: "on-time", nextAfter: 31_050 });
  });

  it("owed slots within the grace run in order: a late run's overlap decision left them to it", () => {
    // every 10 s: a re-run of 10 s began at 27 s and ended at 31 s; its overlap decision left 20 s
    // and 30 s owed, and 20 s runs now: 30 s runs after it, then the schedule goes on from 30 s
    const owed = {
      policy: policy("latest"),
      storedSlot: 20_000,
      graceMs: 60_000,
      previousRunEndedAt: 31_000,
      previousRunSlot: 10_000,
      schedule: every(10_000),
    };
    expect(decideCatchUp({ ...owed, now: 31_050 })).toEqual({ kind: "on-time", nextAfter: 20_000 });
    // without the previous run's slot (a row from an older version) nothing is owed
    expect(decideCatchUp({ ...owed, previousRunSlot: undefined, now: 31_050 })).toEqual({
      kind: "on-time",
      nextAfter: 31_050,
    });
    // an owed slot past the grace is missed like any other
    expect(decideCatchUp({ ...owed, graceMs: 500, now: 31_050 })).toMatchObject({
      kind: "catch-up",
      run: 20_000,
      skipped: [30_000],
    });
  });

  it("lists the queued slot and the slots after the run's end, not those the overlap policy recorded", () => {
    // 10, 11 and 12 fell during the run: queueOne left the newest, 12, owed and recorded 10 and 11
    // skipped at the run's end (12:30); then nothing ran until 15:10
    const decision = decideCatchUp({
      policy: policy("none"),
      storedSlot: 12 * minute,
      graceMs: 1_000,
      schedule: every(minute),
      now: 15 * minute + 10_000,
      previousRunEndedAt: 12 * minute + 30_000,
    });
    expect(decision).toMatchObject({
      kind: "catch-up",
      run: null,
      skipped: [12 * minute, 13 * minute, 14 * minute, 15 * minute],
      skippedCount: 4,
    });
  });
});

describe("decideCatchUp: a stop shorter than the grace", () => {
  const seconds = 1_000;
  // `*/5 * * * * *`, the default grace (60 s): the last run was the slot 0 s, the service stopped
  // for 32 s; the stored slot 5 s runs at 35.5 s
  const shortStop = {
    storedSlot: 5 * seconds,
    now: 35.5 * seconds,
    graceMs: 60 * seconds,
    previousRunEndedAt: 0.1 * seconds,
    schedule: every(5 * seconds),
  };

  it("the oldest missed slot runs late, within the grace; the 6 past slots after it are recorded skipped", () => {
    for (const runs of ["none", "latest"] as const) {
      const decision = decideCatchUp({ ...shortStop, policy: policy(runs) });
      expect(decision).toMatchObject({
        kind: "catch-up",
        run: 5 * seconds,
        skipped: [10, 15, 20, 25, 30, 35].map((s) => s * seconds),
        skippedCount: 6,
        atLeast: false,
        nextAfter: 35.5 * seconds,
      });
      if (decision.kind !== "catch-up") throw new Error("expected a catch-up");
      expect(decision.reason).toMatch(/missed while nothing ran.*within the missed-slot grace/);
    }
  });

  it("all runs them all, one after the other: nothing is skipped", () => {
    expect(decideCatchUp({ ...shortStop, policy: policy("all") })).toEqual({
      kind: "on-time",
      nextAfter: 5 * seconds,
    });
  });

  it("every slot from the stored one up to the start ends with a run, a skipped record or a place in the queue (all), whatever the stop", () => {
    const period = 5 * seconds;
    for (const runs of ["none", "latest", "all"] as const)
      for (const stopS of [0, 3, 4.9, 5, 12, 32, 59, 60, 61, 64, 65, 90, 150, 450]) {
        const now = period + stopS * seconds;
        const decision = decideCatchUp({
          policy: policy(runs),
          storedSlot: period,
          now,
          graceMs: 60 * seconds,
          schedule: every(period),
        });
        const due = every(period).between(period, now, 10_000).slots;
        const ended =
          decision.kind === "on-time"
            ? // an ordinary run of the stored slot; under `all` the slots after it are owed and run next
              due.filter((slot) => slot === period || runs === "all")
            : [
                ...decision.skipped,
                ...due.filter(
                  (slot) =>
                    decision.run !== null &&
                    (slot === decision.run || (runs === "all" && slot > decision.run)),
                ),
              ];
        const label = `${runs}, stopped ${stopS} s`;
        expect(decision.kind === "catch-up" ? decision.skippedCount : 0, label).toBe(
          decision.kind === "catch-up" ? decision.skipped.length : 0,
        );
        expect(
          ended.sort((a, b) => a - b),
          label,
        ).toEqual(due);
      }
  });
});

describe("planRunStart: the start after a 32 s stop (`*/5 * * * * *`, default catch-up, 60 s grace)", () => {
  const at = (seconds: number) => Date.parse("2026-12-01T03:00:00Z") + seconds * 1_000;
  const start = {
    taskName: "report",
    cron: "*/5 * * * * *",
    timezone: "UTC",
    data: {},
    // the last run was the slot 0 s; the service stopped at 3 s and started again at 35 s
    storedSlot: new Date(at(5)),
    now: new Date(at(35.4)),
    graceMs: 60_000,
    previousRunEndedAt: new Date(at(0.2)),
    rerunOrManual: false,
  };

  it("runs the stored slot, records the 6 slots after it skipped, and resumes with the next slot", () => {
    const plan = planRunStart(start);
    expect(plan?.slot.getTime()).toBe(at(5));
    expect(plan?.decision).toMatchObject({
      kind: "catch-up",
      run: at(5),
      skipped: [10, 15, 20, 25, 30, 35].map(at),
      skippedCount: 6,
    });
    expect(plan?.nextRunAt?.getTime()).toBe(at(40));
  });

  it("a re-run or a run-now decides nothing here (its run's end does: overlap.ts)", () => {
    expect(planRunStart({ ...start, rerunOrManual: true })?.decision).toEqual({
      kind: "on-time",
      nextAfter: at(35.4),
    });
  });
});

describe("parseDuration", () => {
  it.each([
    ["90s", 90_000],
    ["15m", 900_000],
    ["6h", 21_600_000],
    ["1d", 86_400_000],
    ["250ms", 250],
  ])("%s", (text, ms) => {
    expect(parseDuration(text)).toEqual({ ok: true, ms });
  });
  it.each([
    ["-5m", /negative/],
    ["fast", /not a duration/],
    ["1.5h", /not a duration/],
    [15, /duration string/],
  ])("%s is refused", (value, reason) => {
    const result = parseDuration(value);
    expect(result.ok).toBe(false);
    if (!result.ok) expect(result.reason).toMatch(reason);
  });
});

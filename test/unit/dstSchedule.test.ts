import { CronExpressionParser } from "cron-parser";
import { describe, expect, it } from "vitest";
import { nextRunTimes } from "../../src/config/cronValidator.js";
import { forgetKnownNextSlots, nextCronSlot, nextCronSlots } from "../../src/core/policies/schedule.js";

/**
 * The DST rule (docs/behaviour.md, "DST"; src/core/policies/schedule.ts), zone by zone:
 * a fixed time in the skipped hour runs shifted forward by the change; a fixed time in the repeated
 * hour runs once (first copy); an hourly wildcard follows the wall clock (no run in the skipped
 * hour, one in each copy of the repeated hour). `cronParser` says where cron-parser 5.10.5 alone
 * agrees ("same") and where this module corrects it.
 */
interface Case {
  zone: string;
  what: string;
  cron: string;
  from: string;
  expected: string[];
  cronParser: "same" | "differs" | "throws";
}

const table: Case[] = [
  // America/New_York: 2026-03-08 02:00 EST -> 03:00 EDT; 2026-11-01 02:00 EDT -> 01:00 EST
  {
    zone: "America/New_York",
    what: "fixed time in the skipped hour",
    cron: "30 2 * * *",
    from: "2026-03-08T05:00:00Z",
    expected: ["2026-03-08T07:30:00.000Z", "2026-03-09T06:30:00.000Z"],
    cronParser: "same",
  },
  {
    zone: "America/New_York",
    what: "fixed time in the repeated hour",
    cron: "30 1 * * *",
    from: "2026-11-01T04:00:00Z",
    expected: ["2026-11-01T05:30:00.000Z", "2026-11-02T06:30:00.000Z"],
    cronParser: "same",
  },
  {
    zone: "America/New_York",
    what: "hourly over the spring-forward",
    cron: "0 * * * *",
    from: "2026-03-08T05:30:00Z",
    expected: ["2026-03-08T06:00:00.000Z", "2026-03-08T07:00:00.000Z", "2026-03-08T08:00:00.000Z"],
    cronParser: "same",
  },
  {
    zone: "America/New_York",
    what: "hourly over the fall-back",
    cron: "0 * * * *",
    from: "2026-11-01T04:30:00Z",
    expected: ["2026-11-01T05:00:00.000Z", "2026-11-01T06:00:00.000Z", "2026-11-01T07:00:00.000Z"],
    cronParser: "same",
  },
  // Europe/London: 2026-03-29 01:00 GMT -> 02:00 BST; 2026-10-25 02:00 BST -> 01:00 GMT
  {
    zone: "Europe/London",
    what: "fixed time in the skipped hour",
    cron: "30 1 * * *",
    from: "2026-03-29T00:00:00Z",
    expected: ["2026-03-29T01:30:00.000Z", "2026-03-30T00:30:00.000Z"],
    cronParser: "same",
  },
  {
    zone: "Europe/London",
    what: "fixed time in the repeated hour",
    cron: "30 1 * * *",
    from: "2026-10-24T23:00:00Z",
    expected: ["2026-10-25T00:30:00.000Z", "2026-10-26T01:30:00.000Z"],
    cronParser: "same",
  },
  {
    zone: "Europe/London",
    what: "hourly over the spring-forward",
    cron: "0 * * * *",
    from: "2026-03-28T23:30:00Z",
    expected: ["2026-03-29T00:00:00.000Z", "2026-03-29T01:00:00.000Z", "2026-03-29T02:00:00.000Z"],
    cronParser: "same",
  },
  {
    zone: "Europe/London",
    what: "hourly over the fall-back",
    cron: "0 * * * *",
    from: "2026-10-24T23:30:00Z",
    expected: ["2026-10-25T00:00:00.000Z", "2026-10-25T01:00:00.000Z", "2026-10-25T02:00:00.000Z"],
    cronParser: "same",
  },
  // Australia/Sydney (southern hemisphere): 2026-10-04 02:00 AEST -> 03:00 AEDT; 2026-04-05 03:00 AEDT -> 02:00 AEST
  {
    zone: "Australia/Sydney",
    what: "fixed time in the skipped hour",
    cron: "30 2 * * *",
    from: "2026-10-03T14:00:00Z",
    expected: ["2026-10-03T16:30:00.000Z", "2026-10-04T15:30:00.000Z"],
    cronParser: "same",
  },
  {
    zone: "Australia/Sydney",
    what: "fixed time in the repeated hour",
    cron: "30 2 * * *",
    from: "2026-04-04T13:00:00Z",
    expected: ["2026-04-04T15:30:00.000Z", "2026-04-05T16:30:00.000Z"],
    cronParser: "same",
  },
  {
    zone: "Australia/Sydney",
    what: "hourly over the spring-forward",
    cron: "0 * * * *",
    from: "2026-10-03T14:30:00Z",
    expected: ["2026-10-03T15:00:00.000Z", "2026-10-03T16:00:00.000Z", "2026-10-03T17:00:00.000Z"],
    cronParser: "same",
  },
  {
    zone: "Australia/Sydney",
    what: "hourly over the fall-back",
    cron: "0 * * * *",
    from: "2026-04-04T13:30:00Z",
    expected: [
      "2026-04-04T14:00:00.000Z",
      "2026-04-04T15:00:00.000Z",
      "2026-04-04T16:00:00.000Z",
      "2026-04-04T17:00:00.000Z",
    ],
    cronParser: "same",
  },
  // Australia/Lord_Howe (30-minute shift): 2026-10-04 02:00 +10:30 -> 02:30 +11; 2026-04-05 02:00 +11 -> 01:30 +10:30
  {
    zone: "Australia/Lord_Howe",
    what: "fixed time in the skipped half hour",
    cron: "15 2 * * *",
    from: "2026-10-03T14:00:00Z",
    expected: ["2026-10-03T15:45:00.000Z", "2026-10-04T15:15:00.000Z"],
    cronParser: "differs",
  },
  {
    zone: "Australia/Lord_Howe",
    what: "fixed time in the repeated half hour",
    cron: "45 1 * * *",
    from: "2026-04-04T13:00:00Z",
    expected: ["2026-04-04T14:45:00.000Z", "2026-04-05T15:15:00.000Z"],
    cronParser: "same",
  },
  {
    zone: "Australia/Lord_Howe",
    what: "hourly over the spring-forward",
    cron: "0 * * * *",
    from: "2026-10-03T14:00:00Z",
    expected: ["2026-10-03T14:30:00.000Z", "2026-10-03T16:00:00.000Z", "2026-10-03T17:00:00.000Z"],
    cronParser: "same",
  },
  {
    zone: "Australia/Lord_Howe",
    what: "hourly over the fall-back",
    cron: "0 * * * *",
    from: "2026-04-04T13:30:00Z",
    expected: ["2026-04-04T14:00:00.000Z", "2026-04-04T15:30:00.000Z", "2026-04-04T16:30:00.000Z"],
    cronParser: "throws",
  },
  {
    zone: "Australia/Lord_Howe",
    what: "half-hourly over the spring-forward",
    cron: "*/30 * * * *",
    from: "2026-10-03T13:50:00Z",
    expected: [
      "2026-10-03T14:00:00.000Z",
      "2026-10-03T14:30:00.000Z",
      "2026-10-03T15:00:00.000Z",
      "2026-10-03T15:30:00.000Z",
      "2026-10-03T16:00:00.000Z",
    ],
    cronParser: "differs",
  },
  {
    zone: "Australia/Lord_Howe",
    what: "half-hourly over the fall-back",
    cron: "*/30 * * * *",
    from: "2026-04-04T13:50:00Z",
    expected: [
      "2026-04-04T14:00:00.000Z",
      "2026-04-04T14:30:00.000Z",
      "2026-04-04T15:00:00.000Z",
      "2026-04-04T15:30:00.000Z",
    ],
    cronParser: "differs",
  },
];

function cronParserAlone(cron: string, zone: string, from: string, count: number): string[] | "throws" {
  const iterator = CronExpressionParser.parse(cron, { currentDate: new Date(from), tz: zone });
  const slots: string[] = [];
  try {
    while (slots.length < count) slots.push(iterator.next().toDate().toISOString());
  } catch {
    return "throws"; // take() hides this: it stops early
  }
  return slots;
}

describe("DST rule", () => {
  it.each(table)("$zone: $what ($cron)", ({ zone, cron, from, expected, cronParser }) => {
    const slots = nextCronSlots(cron, zone, new Date(from).getTime(), expected.length);
    expect(slots.map((slot) => new Date(slot).toISOString())).toEqual(expected);
    // what the API and dashboard show is the same list
    expect(nextRunTimes(cron, zone, new Date(from), expected.length).map((d) => d.toISOString())).toEqual(
      expected,
    );
    const alone = cronParserAlone(cron, zone, from, expected.length);
    if (cronParser === "same") expect(alone).toEqual(expected);
    else if (cronParser === "throws") expect(alone).toBe("throws");
    else expect(alone).not.toEqual(expected);
  });
});

describe("known next slots", () => {
  /** A fixed-seed generator: the same draws in every run. */
  function draws(seed: number): () => number {
    let state = seed;
    return () => {
      state = (state * 1_103_515_245 + 12_345) % 2_147_483_648;
      return state / 2_147_483_648;
    };
  }

  it("answer as a fresh computation at any instant, DST changes included", () => {
    const random = draws(19);
    const crons = [
      "* * * * *",
      "*/7 * * * *",
      "30 2 * * *",
      "0 * * * *",
      "15 1,2,3 * * *",
      "0 0 1 * *",
      "*/20 * * * * *",
    ];
    const zones = [
      "UTC",
      "America/New_York",
      "Europe/Berlin",
      "Australia/Lord_Howe",
      "Asia/Tehran",
      "Pacific/Chatham",
    ];
    // around the 2026 changes of those zones, and away from them
    const around = [
      "2026-03-08T07:00:00Z",
      "2026-03-29T01:00:00Z",
      "2026-04-05T15:00:00Z",
      "2026-10-04T16:00:00Z",
      "2026-11-01T06:00:00Z",
      "2026-07-15T12:00:00Z",
    ];
    let compared = 0;
    for (let trial = 0; trial < 300; trial++) {
      const cron = crons[Math.floor(random() * crons.length)] as string;
      const zone = zones[Math.floor(random() * zones.length)] as string;
      const center = Date.parse(around[Math.floor(random() * around.length)] as string);
      const first = Math.floor(center + (random() - 0.5) * 2 * 86_400_000);
      forgetKnownNextSlots();
      const next = nextCronSlot(cron, zone, first);
      if (next === undefined) continue;
      // mostly between the first instant and its answer, where the answer is kept; also around them
      const later =
        random() < 0.8
          ? first + Math.floor(random() * (next - first))
          : first - 3_600_000 + Math.floor(random() * (next - first + 7_200_000));
      const remembered = nextCronSlot(cron, zone, later);
      forgetKnownNextSlots();
      expect({ cron, zone, later, answer: remembered }).toEqual({
        cron,
        zone,
        later,
        answer: nextCronSlot(cron, zone, later),
      });
      // the answer itself is not before the next slot: it is computed
      nextCronSlot(cron, zone, first);
      const afterAnswer = nextCronSlot(cron, zone, next);
      forgetKnownNextSlots();
      expect(afterAnswer).toBe(nextCronSlot(cron, zone, next));
      compared += 1;
    }
    expect(compared).toBeGreaterThan(270);
  });
});

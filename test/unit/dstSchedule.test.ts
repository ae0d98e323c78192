import { CronExpressionParser } from "cron-parser";
import { describe, expect, it } from "vitest";
import { nextRunTimes } from "../../src/config/cronValidator.js";
import {
  cronSlotsBetween,
  forgetKnownNextSlots,
  nextCronSlot,
  nextCronSlots,
  slotsBetween,
} from "../../src/core/policies/schedule.js";
import { offsetStretches } from "../../src/core/policies/timezoneOffsets.js";

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

describe("the slots of a range (cronSlotsBetween: the timeline's missed slots, catch-up, overlap)", () => {
  const HOUR = 3_600_000;

  /** nextCronSlot stepped from `from` (what cronSlotsBetween must answer, found another way). */
  function stepped(cron: string, zone: string, from: number, to: number): number[] {
    const slots: number[] = [];
    for (let next = nextCronSlot(cron, zone, from - 1); next !== undefined && next <= to; ) {
      slots.push(next);
      next = nextCronSlot(cron, zone, next);
    }
    return slots;
  }

  // times as numbers (ms since the epoch), each with its ISO form
  it.each([
    {
      what: "New York spring-forward, fixed time in the skipped hour: shifted to 03:30 EDT",
      zone: "America/New_York",
      cron: "30 2 * * *",
      from: 1_772_928_000_000, // 2026-03-08T00:00:00Z
      to: 1_773_057_600_000, // 2026-03-09T12:00:00Z
      expected: [1_772_955_000_000, 1_773_037_800_000], // 07:30Z (03:30 EDT), 9 Mar 06:30Z
    },
    {
      what: "New York spring-forward, 02:30 (shifted) and 03:30 land on one instant: one run",
      zone: "America/New_York",
      cron: "30 2,3 * * *",
      from: 1_772_928_000_000, // 2026-03-08T00:00:00Z
      to: 1_772_971_200_000, // 2026-03-08T12:00:00Z
      expected: [1_772_955_000_000], // 07:30Z
    },
    {
      what: "New York spring-forward, a range that starts at the change still holds the shifted slot",
      zone: "America/New_York",
      cron: "30 2 * * *",
      from: 1_772_953_200_000, // 2026-03-08T07:00:00Z, the change
      to: 1_772_956_800_000, // 2026-03-08T08:00:00Z
      expected: [1_772_955_000_000], // 07:30Z
    },
    {
      what: "New York spring-forward, a wildcard hour follows the wall clock (01:00, 01:30 EST, 03:00, 03:30 EDT)",
      zone: "America/New_York",
      cron: "*/30 * * * *",
      from: 1_772_949_600_000, // 2026-03-08T06:00:00Z
      to: 1_772_955_000_000, // 2026-03-08T07:30:00Z
      expected: [1_772_949_600_000, 1_772_951_400_000, 1_772_953_200_000, 1_772_955_000_000],
    },
    {
      what: "New York fall-back, fixed time in the repeated hour: first copy only",
      zone: "America/New_York",
      cron: "30 1 * * *",
      from: 1_793_505_600_000, // 2026-11-01T04:00:00Z
      to: 1_793_620_800_000, // 2026-11-02T12:00:00Z
      expected: [1_793_511_000_000, 1_793_601_000_000], // 05:30Z (01:30 EDT), 2 Nov 06:30Z
    },
    {
      what: "New York fall-back, a range over the second copy alone holds no slot",
      zone: "America/New_York",
      cron: "30 1 * * *",
      from: 1_793_512_800_000, // 2026-11-01T06:00:00Z (01:00 EST)
      to: 1_793_516_400_000, // 2026-11-01T07:00:00Z
      expected: [],
    },
    {
      what: "New York fall-back, fixed hours 1-2: 01:00 and 01:30 once (EDT), then 02:00 and 02:30 EST",
      zone: "America/New_York",
      cron: "0,30 1-2 * * *",
      from: 1_793_505_600_000, // 2026-11-01T04:00:00Z
      to: 1_793_520_000_000, // 2026-11-01T08:00:00Z
      expected: [1_793_509_200_000, 1_793_511_000_000, 1_793_516_400_000, 1_793_518_200_000],
    },
    {
      what: "New York fall-back, a wildcard hour runs in both copies (01:00 EDT, 01:00 EST, 02:00 EST)",
      zone: "America/New_York",
      cron: "0 * * * *",
      from: 1_793_507_400_000, // 2026-11-01T04:30:00Z
      to: 1_793_516_400_000, // 2026-11-01T07:00:00Z
      expected: [1_793_509_200_000, 1_793_512_800_000, 1_793_516_400_000],
    },
    {
      what: "Lord Howe spring-forward (30 min), fixed time in the skipped half hour: 02:45",
      zone: "Australia/Lord_Howe",
      cron: "15 2 * * *",
      from: 1_791_036_000_000, // 2026-10-03T14:00:00Z
      to: 1_791_129_600_000, // 2026-10-04T16:00:00Z
      expected: [1_791_042_300_000, 1_791_126_900_000], // 15:45Z, 4 Oct 15:15Z
    },
    {
      what: "Lord Howe fall-back, half-hourly: both copies of the repeated half hour",
      zone: "Australia/Lord_Howe",
      cron: "*/30 * * * *",
      from: 1_775_310_600_000, // 2026-04-04T13:50:00Z
      to: 1_775_316_600_000, // 2026-04-04T15:30:00Z
      expected: [1_775_311_200_000, 1_775_313_000_000, 1_775_314_800_000, 1_775_316_600_000],
    },
    {
      what: "Lord Howe fall-back, hourly: 01:00 +11, then 02:00 and 03:00 +10:30 (where cron-parser throws)",
      zone: "Australia/Lord_Howe",
      cron: "0 * * * *",
      from: 1_775_309_400_000, // 2026-04-04T13:30:00Z
      to: 1_775_320_200_000, // 2026-04-04T16:30:00Z
      expected: [1_775_311_200_000, 1_775_316_600_000, 1_775_320_200_000],
    },
  ])("$what", ({ zone, cron, from, to, expected }) => {
    expect(cronSlotsBetween(cron, zone, from, to, 100)).toEqual({ slots: expected, complete: true });
    expect(stepped(cron, zone, from, to)).toEqual(expected);
  });

  it("lists the same slots as nextCronSlot stepped, over 2026 changes of five zones", () => {
    // (not every minute: nextCronSlot alone takes about 0.2 s a day of those near a change)
    const crons = [
      "*/7 * * * *",
      "*/30 * * * *",
      "0 * * * *",
      "0 */2 * * *",
      "30 2 * * *",
      "45 1 * * *",
      "15 1,2,3 * * *",
      "0,30 1-3 * * *",
      "*/5 9-17 * * *",
      "0 0 1 * *",
    ];
    const changes: Array<[string, number]> = [
      ["America/New_York", 1_772_953_200_000], // 2026-03-08T07:00:00Z
      ["America/New_York", 1_793_512_800_000], // 2026-11-01T06:00:00Z
      ["Europe/London", 1_774_746_000_000], // 2026-03-29T01:00:00Z
      ["Australia/Sydney", 1_775_318_400_000], // 2026-04-04T16:00:00Z
      ["Australia/Lord_Howe", 1_775_314_800_000], // 2026-04-04T15:00:00Z
      ["Australia/Lord_Howe", 1_791_041_400_000], // 2026-10-03T15:30:00Z
      ["Pacific/Chatham", 1_790_431_200_000], // 2026-09-26T14:00:00Z (+12:45 -> +13:45)
    ];
    let compared = 0;
    for (const cron of crons)
      for (const [zone, change] of changes)
        for (const [from, to] of [
          [change - 14 * HOUR + 17_000, change + 10 * HOUR],
          [change - 2 * HOUR, change + 20 * HOUR],
        ] as const) {
          forgetKnownNextSlots();
          expect({ cron, zone, from, slots: cronSlotsBetween(cron, zone, from, to, 10_000).slots }).toEqual({
            cron,
            zone,
            from,
            slots: stepped(cron, zone, from, to),
          });
          compared += 1;
        }
    expect(compared).toBe(crons.length * changes.length * 2);
  });

  it("a seconds cron over a change, and evenly spaced slots counted without cron steps", () => {
    const from = 1_774_745_940_000; // 2026-03-29T00:59:00Z, London's change at 01:00Z
    const to = 1_774_746_060_000; // 2026-03-29T01:01:00Z
    const expected = [0, 20, 40, 60, 80, 100, 120].map((s) => from + s * 1_000);
    expect(cronSlotsBetween("*/20 * * * * *", "Europe/London", from, to, 100).slots).toEqual(expected);
    expect(stepped("*/20 * * * * *", "Europe/London", from, to)).toEqual(expected);
    // every 20 s is even: no budget spent, over a whole day too
    const budget = { cronSteps: 0 };
    expect(
      cronSlotsBetween("*/20 * * * * *", "Europe/London", from, from + 86_400_000, 10_000, budget),
    ).toEqual({
      slots: expected
        .slice(0, 1)
        .flatMap((first) => Array.from({ length: 4_321 }, (_, i) => first + i * 20_000)),
      complete: true,
    });
    expect(budget.cronSteps).toBe(0);
  });

  it("stops at the limit or the budget, and says the list is incomplete", () => {
    const from = 1_772_928_000_000; // 2026-03-08T00:00:00Z
    const day = 86_400_000;
    expect(cronSlotsBetween("30 2 * * *", "America/New_York", from, from + 3 * day, 2)).toEqual({
      slots: [1_772_955_000_000, 1_773_037_800_000],
      complete: false,
    });
    // */5 in hours 9-17 is not evenly spaced: stepped, one cron step a slot (plus the one past the end)
    const budget = { cronSteps: 10 };
    const cut = cronSlotsBetween("*/5 9-17 * * *", "America/New_York", from, from + day, 1_000, budget);
    // the slots listed are the oldest ones (those of the stretches it finished)
    expect(cut.complete).toBe(false);
    expect(cut.slots).toEqual(
      stepped("*/5 9-17 * * *", "America/New_York", from, from + day).slice(0, cut.slots.length),
    );
    expect(budget.cronSteps).toBe(0);
    const enough = { cronSteps: 200 };
    expect(slotsBetween("*/5 9-17 * * *", "America/New_York", from, from + day, 1_000, enough).complete).toBe(
      true,
    );
  });

  it("an expression that does not parse has no slots; an unknown timezone throws, as nextCronSlot's check does", () => {
    expect(cronSlotsBetween("61 * * * *", "UTC", 0, 86_400_000, 10)).toEqual({ slots: [], complete: true });
    expect(() => cronSlotsBetween("0 * * * *", "Mars/Olympus", 0, 86_400_000, 10)).toThrow(RangeError);
  });
});

describe("offset stretches", () => {
  it("cover a range with one stretch per offset, each change the start of the next", () => {
    const from = 1_767_225_600_000; // 2026-01-01T00:00:00Z
    const to = 1_798_761_599_999; // 2026-12-31T23:59:59.999Z
    expect(offsetStretches("America/New_York", from, to)).toEqual([
      { start: from, end: 1_772_953_200_000, offset: -5 * 3_600_000, before: undefined },
      { start: 1_772_953_200_000, end: 1_793_512_800_000, offset: -4 * 3_600_000, before: -5 * 3_600_000 },
      { start: 1_793_512_800_000, end: to + 1, offset: -5 * 3_600_000, before: -4 * 3_600_000 },
    ]);
    expect(offsetStretches("Asia/Kolkata", from, to)).toEqual([
      { start: from, end: to + 1, offset: 5.5 * 3_600_000, before: undefined },
    ]);
  });
});

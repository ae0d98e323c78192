import { describe, expect, it } from "vitest";
import { parseCalendars } from "../../src/config/calendarConfig.js";
import { type Calendar, excludedBy } from "../../src/core/policies/calendar.js";
import { nextSlots } from "../../src/core/policies/schedule.js";

/**
 * The calendar decision (src/core/policies/calendar.ts) with literal inputs: which slots a
 * calendar excludes, read in the task's timezone with its DST rule.
 */

const ICS = `BEGIN:VCALENDAR
VERSION:2.0
PRODID:-//cronwarden//test//EN
BEGIN:VEVENT
UID:christmas
SUMMARY:Christmas
DTSTART;VALUE=DATE:20261225
DTEND;VALUE=DATE:20261227
END:VEVENT
BEGIN:VEVENT
UID:new-year
SUMMARY:New Year's Day
DTSTART;VALUE=DATE:20260101
RRULE:FREQ=YEARLY
END:VEVENT
BEGIN:VEVENT
UID:maintenance
SUMMARY:Maintenance (Berlin time)
DTSTART;TZID=Europe/Berlin:20260105T220000
DTEND;TZID=Europe/Berlin:20260106T010000
RRULE:FREQ=WEEKLY;BYDAY=MO;COUNT=10
END:VEVENT
BEGIN:VEVENT
UID:outage
SUMMARY:Provider outage (UTC)
DTSTART:20260301T100000Z
DURATION:PT2H
END:VEVENT
BEGIN:VEVENT
UID:cancelled
STATUS:CANCELLED
DTSTART;VALUE=DATE:20260704
END:VEVENT
END:VCALENDAR
`;

function calendars(section: Record<string, unknown>, files: Record<string, string> = {}): Calendar[] {
  const parsed = parseCalendars(section, (file) => {
    const text = files[file];
    if (text === undefined) throw Object.assign(new Error("no such file"), { code: "ENOENT" });
    return text;
  });
  expect([...parsed.problems.values()]).toEqual([]);
  return [...parsed.calendars.values()];
}

const holidays = calendars({ holidays: { dates: ["2026-03-29", "2026-11-01", "2026-12-25"] } });
const weekend = calendars({
  weekend: { weekly: [{ from: "Fri 18:00", to: "Mon 06:00" }] },
  nightly: { weekly: [{ from: "Tue 22:00", to: "Wed 02:00" }] },
});
const freeze = calendars({
  freeze: {
    ranges: [
      { from: "2026-12-18", to: "2027-01-04" },
      { from: "2026-06-01T18:00", to: "2026-06-01T20:00" },
    ],
  },
});
const ics = calendars({ public: { ics: "holidays.ics" } }, { "holidays.ics": ICS });

const at = (iso: string) => Date.parse(iso);

describe("calendar decision: which slots a calendar excludes", () => {
  const cases: [string, Calendar[], string, string, string | undefined][] = [
    // a holiday on a spring-forward day (Berlin 2026-03-29: 02:00 CET -> 03:00 CEST)
    [
      "Berlin, the day before the change, 09:00 CET",
      holidays,
      "Europe/Berlin",
      "2026-03-28T08:00:00Z",
      undefined,
    ],
    ["Berlin, 00:30 CET on the holiday", holidays, "Europe/Berlin", "2026-03-28T23:30:00Z", "holidays"],
    [
      "Berlin, 01:59 CET just before the skipped hour",
      holidays,
      "Europe/Berlin",
      "2026-03-29T00:59:00Z",
      "holidays",
    ],
    [
      "Berlin, 03:00 CEST just after the skipped hour",
      holidays,
      "Europe/Berlin",
      "2026-03-29T01:00:00Z",
      "holidays",
    ],
    ["Berlin, 09:00 CEST on the holiday", holidays, "Europe/Berlin", "2026-03-29T07:00:00Z", "holidays"],
    ["Berlin, 23:59 CEST on the holiday", holidays, "Europe/Berlin", "2026-03-29T21:59:00Z", "holidays"],
    ["Berlin, 00:00 CEST the day after", holidays, "Europe/Berlin", "2026-03-29T22:00:00Z", undefined],
    // the same date in UTC would be an hour off: the task's timezone decides
    ["UTC task, 23:30 UTC the day before", holidays, "UTC", "2026-03-28T23:30:00Z", undefined],
    // a holiday on a fall-back day (New York 2026-11-01: 02:00 EDT -> 01:00 EST, a 25-hour day)
    ["New York, 23:59 EDT the day before", holidays, "America/New_York", "2026-11-01T03:59:00Z", undefined],
    ["New York, 00:00 EDT on the holiday", holidays, "America/New_York", "2026-11-01T04:00:00Z", "holidays"],
    ["New York, 01:30 EDT (first copy)", holidays, "America/New_York", "2026-11-01T05:30:00Z", "holidays"],
    ["New York, 01:30 EST (second copy)", holidays, "America/New_York", "2026-11-01T06:30:00Z", "holidays"],
    [
      "New York, 23:59 EST, the 25th hour's day",
      holidays,
      "America/New_York",
      "2026-11-02T04:59:00Z",
      "holidays",
    ],
    ["New York, 00:00 EST the day after", holidays, "America/New_York", "2026-11-02T05:00:00Z", undefined],
    // one instant, two zones: Christmas has begun in Berlin, not yet in New York
    ["Berlin, 00:30 on Dec 25", holidays, "Europe/Berlin", "2026-12-24T23:30:00Z", "holidays"],
    ["New York, 18:30 on Dec 24", holidays, "America/New_York", "2026-12-24T23:30:00Z", undefined],
    // a weekly window across midnight and the week's end (Fri 2026-12-04 .. Mon 2026-12-07, Berlin CET)
    ["weekend, Fri 17:59", weekend, "Europe/Berlin", "2026-12-04T16:59:00Z", undefined],
    ["weekend, Fri 18:00", weekend, "Europe/Berlin", "2026-12-04T17:00:00Z", "weekend"],
    ["weekend, Sat 12:00", weekend, "Europe/Berlin", "2026-12-05T11:00:00Z", "weekend"],
    ["weekend, Sun 23:59", weekend, "Europe/Berlin", "2026-12-06T22:59:00Z", "weekend"],
    ["weekend, Mon 00:00", weekend, "Europe/Berlin", "2026-12-06T23:00:00Z", "weekend"],
    ["weekend, Mon 05:59", weekend, "Europe/Berlin", "2026-12-07T04:59:00Z", "weekend"],
    ["weekend, Mon 06:00", weekend, "Europe/Berlin", "2026-12-07T05:00:00Z", undefined],
    ["weekend, Wed 12:00", weekend, "Europe/Berlin", "2026-12-09T11:00:00Z", undefined],
    ["nightly, Tue 21:59", weekend, "Europe/Berlin", "2026-12-08T20:59:00Z", undefined],
    ["nightly, Tue 23:00", weekend, "Europe/Berlin", "2026-12-08T22:00:00Z", "nightly"],
    ["nightly, Wed 01:59", weekend, "Europe/Berlin", "2026-12-09T00:59:00Z", "nightly"],
    ["nightly, Wed 02:00", weekend, "Europe/Berlin", "2026-12-09T01:00:00Z", undefined],
    // a weekly window read on the wall clock in summer time too (Fri 18:00 CEST = 16:00 UTC)
    ["weekend in summer, Fri 18:00 CEST", weekend, "Europe/Berlin", "2026-07-03T16:00:00Z", "weekend"],
    ["weekend in summer, Fri 17:00 CEST", weekend, "Europe/Berlin", "2026-07-03T15:00:00Z", undefined],
    // a date range (a freeze window): a date as `to` includes that day
    ["freeze, the day before", freeze, "Europe/Berlin", "2026-12-17T22:59:00Z", undefined],
    ["freeze, its first minute", freeze, "Europe/Berlin", "2026-12-17T23:00:00Z", "freeze"],
    ["freeze, over New Year", freeze, "Europe/Berlin", "2027-01-01T09:00:00Z", "freeze"],
    ["freeze, its last day's last minute", freeze, "Europe/Berlin", "2027-01-04T22:59:00Z", "freeze"],
    ["freeze, the day after", freeze, "Europe/Berlin", "2027-01-04T23:00:00Z", undefined],
    ["freeze, a date-time range, inside", freeze, "Europe/Berlin", "2026-06-01T16:30:00Z", "freeze"],
    ["freeze, a date-time range, its end", freeze, "Europe/Berlin", "2026-06-01T18:00:00Z", undefined],
    // an .ics file: all-day events (DTEND exclusive), a yearly rule, a TZID weekly rule, a UTC event
    ["ics, Christmas Eve", ics, "Europe/Berlin", "2026-12-24T08:00:00Z", undefined],
    ["ics, Boxing Day", ics, "Europe/Berlin", "2026-12-26T08:00:00Z", "public"],
    ["ics, Dec 27 (DTEND is exclusive)", ics, "Europe/Berlin", "2026-12-27T08:00:00Z", undefined],
    ["ics, New Year's Day 2029 (RRULE yearly)", ics, "America/New_York", "2029-01-01T14:00:00Z", "public"],
    ["ics, Jan 2 2029", ics, "America/New_York", "2029-01-02T14:00:00Z", undefined],
    [
      "ics, Monday 23:00 Berlin from a New York task",
      ics,
      "America/New_York",
      "2026-01-12T22:00:00Z",
      "public",
    ],
    ["ics, Monday 21:00 Berlin", ics, "America/New_York", "2026-01-12T20:00:00Z", undefined],
    ["ics, the 11th Monday (COUNT=10 ended)", ics, "America/New_York", "2026-03-16T22:00:00Z", undefined],
    ["ics, UTC event, inside", ics, "Asia/Tokyo", "2026-03-01T11:59:00Z", "public"],
    ["ics, UTC event, its end", ics, "Asia/Tokyo", "2026-03-01T12:00:00Z", undefined],
    ["ics, a cancelled event excludes nothing", ics, "UTC", "2026-07-04T12:00:00Z", undefined],
    ["no calendar", [], "UTC", "2026-12-25T12:00:00Z", undefined],
  ];

  it.each(cases)("%s", (_name, given, timezone, slot, expected) => {
    expect(excludedBy(given, at(slot), timezone)).toBe(expected);
  });

  it("names the first calendar, in the order the task's exclude lists them", () => {
    const both = [...freeze, ...holidays];
    expect(excludedBy(both, at("2026-12-25T08:00:00Z"), "Europe/Berlin")).toBe("freeze");
    expect(excludedBy([...holidays, ...freeze], at("2026-12-25T08:00:00Z"), "Europe/Berlin")).toBe(
      "holidays",
    );
  });
});

describe("next slots leave out what calendars exclude", () => {
  it("a daily 09:00 in Berlin skips Christmas and Boxing Day", () => {
    const slots = nextSlots("0 9 * * *", "Europe/Berlin", at("2026-12-23T12:00:00Z"), 3, ics);
    expect(slots.map((slot) => new Date(slot).toISOString())).toEqual([
      "2026-12-24T08:00:00.000Z",
      "2026-12-27T08:00:00.000Z",
      "2026-12-28T08:00:00.000Z",
    ]);
  });

  it("an hourly cron in New York skips every hour of the 25-hour holiday", () => {
    const slots = nextSlots("0 * * * *", "America/New_York", at("2026-11-01T02:30:00Z"), 3, holidays);
    // 2026-10-31 23:00 EDT, then 2026-11-02 00:00 EST (25 hourly slots of Nov 1 skipped)
    expect(slots.map((slot) => new Date(slot).toISOString())).toEqual([
      "2026-11-01T03:00:00.000Z",
      "2026-11-02T05:00:00.000Z",
      "2026-11-02T06:00:00.000Z",
    ]);
  });

  it("a minute cron jumps over a two-week freeze", () => {
    const slots = nextSlots("* * * * *", "Europe/Berlin", at("2026-12-17T22:58:30Z"), 2, freeze);
    expect(slots.map((slot) => new Date(slot).toISOString())).toEqual([
      "2026-12-17T22:59:00.000Z",
      "2027-01-04T23:00:00.000Z",
    ]);
  });

  it("a calendar that excludes every slot gives no next slot rather than looping", () => {
    const always = calendars({ always: { weekly: [{ from: "Mon 00:00", to: "Mon 00:01" }] } });
    expect(nextSlots("0 0 * * 1", "UTC", at("2026-01-01T00:00:00Z"), 2, always)).toEqual([]);
  });
});

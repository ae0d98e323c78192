import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { describeProblems, parseDesiredState } from "../../src/config/desiredState.js";
import { planReconcile } from "../../src/reconcile/reconcilePlan.js";

const options = {
  defaultTimezone: "Europe/Berlin",
  rules: { minIntervalMs: 60_000 },
  now: new Date("2026-12-01T00:00:00Z"),
  source: "file tasks.yaml",
  revision: "r1",
};

const dir = mkdtempSync(path.join(tmpdir(), "cronwarden-calendars-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const GOOD_ICS = `BEGIN:VCALENDAR
VERSION:2.0
PRODID:-//cronwarden//test//EN
BEGIN:VEVENT
UID:1
DTSTART;VALUE=DATE:20261225
END:VEVENT
END:VCALENDAR
`;

/** The document with one good task and `t` (with `exclude`), under `calendars`. */
function parse(calendars: unknown, exclude: unknown = "c") {
  return parseDesiredState(
    {
      calendars,
      tasks: [
        { name: "good", enabled: true, cron: "0 2 * * *" },
        { name: "t", enabled: true, cron: "0 9 * * *", exclude },
      ],
    },
    options,
  );
}

describe("calendars in the config", () => {
  it("accepts dates, weekly windows, ranges and an .ics file, and compiles them into the task's entry", () => {
    const file = path.join(dir, "holidays.ics");
    writeFileSync(file, GOOD_ICS);
    const state = parseDesiredState(
      {
        calendars: {
          holidays: { dates: ["2026-12-26", "2026-12-25", "2026-12-25"] },
          weekend: { weekly: [{ from: "Fri 18:00", to: "monday 06:00" }] },
          freeze: { ranges: [{ from: "2026-12-18", to: "2027-01-04" }] },
          public: { ics: file },
        },
        tasks: [
          {
            name: "t",
            enabled: true,
            cron: "0 9 * * *",
            exclude: ["holidays", "weekend", "freeze", "public"],
          },
          { name: "u", enabled: true, cron: "0 9 * * *", exclude: "holidays" },
        ],
      },
      options,
    );
    expect(state.rejected).toEqual([]);
    const [t, u] = state.tasks;
    expect(t?.exclude?.map((calendar) => calendar.name)).toEqual(["holidays", "weekend", "freeze", "public"]);
    expect(t?.exclude?.[0]).toEqual({ name: "holidays", dates: ["2026-12-25", "2026-12-26"] });
    // Fri 18:00 = 4 days and 18 hours after Monday 00:00; Mon 06:00 = 360 minutes
    expect(t?.exclude?.[1]).toEqual({ name: "weekend", weekly: [{ from: 4 * 1440 + 18 * 60, to: 360 }] });
    expect(t?.exclude?.[2]).toEqual({
      name: "freeze",
      ranges: [{ from: Date.UTC(2026, 11, 18), to: Date.UTC(2027, 0, 5) }],
    });
    expect(t?.exclude?.[3]).toEqual({
      name: "public",
      events: [{ kind: "date", start: Date.UTC(2026, 11, 25), durationMs: 86_400_000 }],
    });
    expect(u?.exclude?.map((calendar) => calendar.name)).toEqual(["holidays"]);
  });

  const bad: [string, unknown, unknown, string, string][] = [
    [
      "an unknown calendar name",
      { holidays: { dates: ["2026-12-25"] } },
      ["holidays", "holidayz"],
      "exclude",
      'no calendar "holidayz" in the document\'s calendars (defined: holidays); define it or fix the name',
    ],
    [
      "no calendars at all",
      undefined,
      "holidays",
      "exclude",
      'no calendar "holidays" in the document\'s calendars (none is defined)',
    ],
    [
      "exclude of the wrong type",
      { c: { dates: [] } },
      3,
      "exclude",
      "must be a calendar name or a list of them",
    ],
    [
      "an empty exclude list",
      { c: { dates: [] } },
      [],
      "exclude",
      "must be a calendar name or a list of them",
    ],
    [
      "a calendars section that is a list",
      ["c"],
      "c",
      "exclude",
      'calendar "c" is invalid: calendars ["c"]: must be a map of calendar names',
    ],
    [
      "a date that does not exist",
      { c: { dates: ["2026-02-30"] } },
      "c",
      "exclude",
      'calendar "c" is invalid: calendars.c.dates[0] "2026-02-30": must be a real date "YYYY-MM-DD"',
    ],
    [
      "a date with a time",
      { c: { dates: ["2026-12-25T00:00"] } },
      "c",
      "exclude",
      'calendars.c.dates[0] "2026-12-25T00:00": must be a real date',
    ],
    [
      "dates that are not a list",
      { c: { dates: "2026-12-25" } },
      "c",
      "exclude",
      'calendars.c.dates "2026-12-25": must be a list',
    ],
    [
      "an unknown calendar key",
      { c: { holidays: ["2026-12-25"] } },
      "c",
      "exclude",
      "unknown key(s) holidays; use dates, weekly, ranges, ics",
    ],
    ["an empty calendar", { c: {} }, "c", "exclude", "is empty; give dates, weekly, ranges or ics"],
    [
      "a weekday that does not exist",
      { c: { weekly: [{ from: "Fry 18:00", to: "Mon 06:00" }] } },
      "c",
      "exclude",
      'calendars.c.weekly[0].from "Fry 18:00": must be a weekday (Mon-Sun) and a 24-hour time HH:MM',
    ],
    [
      "an hour out of range",
      { c: { weekly: [{ from: "Fri 18:00", to: "Mon 24:00" }] } },
      "c",
      "exclude",
      'calendars.c.weekly[0].to "Mon 24:00"',
    ],
    [
      "a window of no length",
      { c: { weekly: [{ from: "Fri 18:00", to: "Fri 18:00" }] } },
      "c",
      "exclude",
      "from and to are the same time",
    ],
    [
      "a window without to",
      { c: { weekly: [{ from: "Fri 18:00" }] } },
      "c",
      "exclude",
      'must be { from: "Fri 18:00", to: "Mon 06:00" }',
    ],
    [
      "a range that ends before it starts",
      { c: { ranges: [{ from: "2027-01-04", to: "2026-12-18" }] } },
      "c",
      "exclude",
      "to is not after from",
    ],
    [
      "a range with an offset",
      { c: { ranges: [{ from: "2026-12-18T00:00Z", to: "2027-01-04" }] } },
      "c",
      "exclude",
      'calendars.c.ranges[0].from "2026-12-18T00:00Z": must be a date "YYYY-MM-DD" or a local date-time',
    ],
    [
      "an .ics path that does not exist",
      { c: { ics: "/nonexistent/holidays.ics" } },
      "c",
      "exclude",
      'calendars.c.ics "/nonexistent/holidays.ics": cannot be read (ENOENT)',
    ],
    [
      "an .ics path that is not a string",
      { c: { ics: 7 } },
      "c",
      "exclude",
      "must be the path of an iCalendar (.ics) file",
    ],
  ];

  it.each(bad)(
    "refuses %s for that entry alone, naming the field, the value and the reason",
    (_name, calendars, exclude, field, reason) => {
      const state = parse(calendars, exclude);
      expect(state.tasks.map((task) => task.name)).toEqual(["good"]);
      expect(state.rejected).toHaveLength(1);
      expect(state.rejected[0]).toMatchObject({ index: 1, name: "t", field, value: exclude });
      expect(state.rejected[0]?.reason).toContain(reason);
      expect(describeProblems(state.rejected[0] as never)[0]).toContain(
        `config tasks[1] "t": exclude ${JSON.stringify(exclude)} is invalid:`,
      );
    },
  );

  const badIcs: [string, string, string][] = [
    ["text that is not iCalendar", "hello", "is not an iCalendar file"],
    ["a calendar without events", "BEGIN:VCALENDAR\nVERSION:2.0\nEND:VCALENDAR\n", "has no VEVENT"],
    [
      "an event without DTSTART",
      "BEGIN:VCALENDAR\nBEGIN:VEVENT\nUID:1\nEND:VEVENT\nEND:VCALENDAR\n",
      "VEVENT 1: has no DTSTART",
    ],
    [
      "a timed event without an end",
      "BEGIN:VCALENDAR\nBEGIN:VEVENT\nSUMMARY:x\nDTSTART:20261225T090000Z\nEND:VEVENT\nEND:VCALENDAR\n",
      'VEVENT 1 ("x"): a timed event needs DTEND or DURATION',
    ],
    [
      "an event that ends before it starts",
      "BEGIN:VCALENDAR\nBEGIN:VEVENT\nDTSTART:20261225T090000Z\nDTEND:20261225T080000Z\nEND:VEVENT\nEND:VCALENDAR\n",
      "ends at or before its start",
    ],
    [
      "an unknown TZID",
      "BEGIN:VCALENDAR\nBEGIN:VEVENT\nDTSTART;TZID=Mars/Olympus:20261225T090000\nDURATION:PT1H\nEND:VEVENT\nEND:VCALENDAR\n",
      'TZID "Mars/Olympus" is not an IANA timezone',
    ],
    [
      "a date that does not exist",
      "BEGIN:VCALENDAR\nBEGIN:VEVENT\nDTSTART;VALUE=DATE:20260230\nEND:VEVENT\nEND:VCALENDAR\n",
      'DTSTART "DTSTART;VALUE=DATE:20260230" is not a real date',
    ],
    [
      "a date-time ical.js cannot read",
      "BEGIN:VCALENDAR\nBEGIN:VEVENT\nDTSTART:2026x\nDURATION:PT1H\nEND:VEVENT\nEND:VCALENDAR\n",
      "VEVENT 1: ",
    ],
    [
      "an EXDATE",
      "BEGIN:VCALENDAR\nBEGIN:VEVENT\nDTSTART;VALUE=DATE:20260101\nRRULE:FREQ=YEARLY\nEXDATE;VALUE=DATE:20270101\nEND:VEVENT\nEND:VCALENDAR\n",
      "EXDATE is not supported",
    ],
    [
      "a bad RRULE",
      "BEGIN:VCALENDAR\nBEGIN:VEVENT\nDTSTART;VALUE=DATE:20260101\nRRULE:FREQ=SOMETIMES\nEND:VEVENT\nEND:VCALENDAR\n",
      "RRULE",
    ],
  ];

  it.each(badIcs)("refuses an .ics file with %s", (_name, text, reason) => {
    const file = path.join(dir, `${_name.replace(/\W+/g, "-")}.ics`);
    writeFileSync(file, text);
    const state = parse({ c: { ics: file } });
    expect(state.tasks.map((task) => task.name)).toEqual(["good"]);
    expect(state.rejected[0]?.field).toBe("exclude");
    expect(state.rejected[0]?.reason).toContain(
      `calendar "c" is invalid: calendars.c.ics ${JSON.stringify(file)}: `,
    );
    expect(state.rejected[0]?.reason).toContain(reason);
  });

  it("a broken calendar refuses only the entries that name it", () => {
    const state = parseDesiredState(
      {
        calendars: { broken: { dates: ["not a date"] }, fine: { dates: ["2026-12-25"] } },
        tasks: [
          { name: "a", enabled: true, cron: "0 9 * * *", exclude: "broken" },
          { name: "b", enabled: true, cron: "0 9 * * *", exclude: "fine" },
          { name: "c", enabled: true, cron: "0 9 * * *" },
        ],
      },
      options,
    );
    expect(state.tasks.map((task) => task.name)).toEqual(["b", "c"]);
    expect(state.rejected.map((entry) => entry.name)).toEqual(["a"]);
  });

  it("refuses exclude on a task with after (its upstreams' slots decide)", () => {
    const state = parseDesiredState(
      {
        calendars: { c: { dates: ["2026-12-25"] } },
        tasks: [
          { name: "up", enabled: true, cron: "0 9 * * *" },
          { name: "down", enabled: true, after: ["up"], exclude: "c" },
        ],
      },
      options,
    );
    expect(state.rejected).toMatchObject([{ name: "down", field: "exclude" }]);
    expect(state.rejected[0]?.reason).toContain('put "exclude" on the upstream');
  });

  it("lists an exclude problem beside the entry's other problems", () => {
    const state = parse({ c: { dates: ["2026-12-25"] } }, "nope");
    const withOther = parseDesiredState(
      {
        calendars: { c: { dates: [] } },
        tasks: [{ name: "t", enabled: true, cron: "0 9 * * *", overlap: "x", exclude: "nope" }],
      },
      options,
    );
    expect(state.rejected[0]?.field).toBe("exclude");
    expect(withOther.rejected[0]?.problems?.map((problem) => problem.field).sort()).toEqual([
      "exclude",
      "overlap",
    ]);
  });
});

describe("the planner and calendars", () => {
  const live = {
    name: "t",
    disabled: false,
    cron: "0 9 * * *",
    timezone: "Europe/Berlin",
    nextRunAt: new Date(),
  };
  const registered = new Set(["t"]);
  const desired = (dates: string[]) =>
    parseDesiredState(
      {
        calendars: { holidays: { dates } },
        tasks: [{ name: "t", enabled: true, cron: "0 9 * * *", exclude: "holidays" }],
      },
      options,
    );

  it("stores a task's calendars, and again only when their days change", () => {
    const first = planReconcile(desired(["2026-12-25"]), [live], registered);
    expect(first.actions).toMatchObject([{ kind: "exclude", task: "t", reason: "exclude none -> holidays" }]);
    // as stored: jsonb orders keys its own way, which is not a change
    const stored = { ...live, exclude: [{ dates: ["2026-12-25"], name: "holidays" }] };
    expect(planReconcile(desired(["2026-12-25"]), [stored], registered).actions).toEqual([]);
    expect(planReconcile(desired(["2026-12-25", "2026-12-26"]), [stored], registered).actions).toMatchObject([
      { kind: "exclude", reason: "exclude holidays: a calendar's days changed" },
    ]);
  });

  it("clears the calendars of an entry that no longer has exclude", () => {
    const none = parseDesiredState({ tasks: [{ name: "t", enabled: true, cron: "0 9 * * *" }] }, options);
    const stored = { ...live, exclude: [{ name: "holidays", dates: ["2026-12-25"] }] };
    expect(planReconcile(none, [stored], registered).actions).toMatchObject([
      { kind: "exclude", exclude: [], reason: "exclude holidays -> none" },
    ]);
  });
});

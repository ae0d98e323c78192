import { readFileSync, statSync } from "node:fs";
import path from "node:path";
import type { Calendar } from "../core/policies/calendar.js";
import { isKnownTimezone } from "../core/policies/schedule.js";
import { TASK_NAME_PATTERN } from "../core/taskName.js";
import { readIcs } from "./icsCalendar.js";

/**
 * The `calendars` section of a config document (docs/calendars.md): named calendars that tasks
 * name in `exclude:`. Each calendar is checked alone: a calendar with a problem refuses only the
 * entries that name it (their tasks keep their last valid state), with the calendar's field, value
 * and reason.
 *
 * ```yaml
 * calendars:
 *   holidays: { dates: ["2026-12-25", "2026-12-26"] }
 *   weekend:  { weekly: [{ from: "Fri 18:00", to: "Mon 06:00" }] }
 *   freeze:   { ranges: [{ from: "2026-12-18", to: "2027-01-04" }] }
 *   public:   { ics: /etc/cronwarden/holidays.ics }
 * ```
 */

const CALENDAR_KEYS = new Set(["dates", "weekly", "ranges", "ics"]);
const DAYS = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"];
const DAY_NAMES = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"];
/** An .ics file is read whole at each config read; a larger one is refused rather than stored in every task's row. */
export const MAX_ICS_BYTES = 1_048_576;
/** Entries of one list (dates, windows, ranges): a calendar is stored in the row of each task that names it. */
const MAX_ITEMS = 5_000;
const DATE = /^(\d{4})-(\d{2})-(\d{2})$/;
const DATE_TIME = /^(\d{4})-(\d{2})-(\d{2})(?:T(\d{2}):(\d{2})(?::(\d{2}))?)?$/;

export interface CalendarProblem {
  field: string;
  value: unknown;
  reason: string;
}

export interface ParsedCalendars {
  calendars: Map<string, Calendar>;
  /** A calendar that could not be read, with its first problem: entries that name it are refused. */
  problems: Map<string, CalendarProblem>;
  /** The section itself is unusable (not a map of names): every entry with `exclude` is refused. */
  unusable?: CalendarProblem;
}

/** Reads an .ics path as text (relative paths from the working directory); throws with a reason. */
export type ReadCalendarFile = (file: string) => string;

export const readCalendarFile: ReadCalendarFile = (file) => {
  const resolved = path.resolve(file);
  const size = statSync(resolved).size;
  if (size > MAX_ICS_BYTES) throw new Error(`is ${size} bytes, over the limit of ${MAX_ICS_BYTES}`);
  return readFileSync(resolved, "utf8");
};

export function parseCalendars(section: unknown, readFile: ReadCalendarFile): ParsedCalendars {
  const calendars = new Map<string, Calendar>();
  const problems = new Map<string, CalendarProblem>();
  if (section === undefined) return { calendars, problems };
  if (typeof section !== "object" || section === null || Array.isArray(section))
    return {
      calendars,
      problems,
      unusable: {
        field: "calendars",
        value: section,
        reason:
          'must be a map of calendar names to definitions, such as { holidays: { dates: ["2026-12-25"] } }',
      },
    };
  for (const [name, definition] of Object.entries(section)) {
    const field = `calendars.${name}`;
    if (!TASK_NAME_PATTERN.test(name)) {
      problems.set(name, {
        field,
        value: name,
        reason: "a calendar name must be 1-200 ASCII letters, digits, '.', '_', '-' or ':'",
      });
      continue;
    }
    const read = readCalendar(name, definition, readFile);
    if ("problem" in read) problems.set(name, read.problem);
    else calendars.set(name, read.calendar);
  }
  return { calendars, problems };
}

type CalendarRead = { calendar: Calendar } | { problem: CalendarProblem };

function readCalendar(name: string, definition: unknown, readFile: ReadCalendarFile): CalendarRead {
  const field = `calendars.${name}`;
  if (typeof definition !== "object" || definition === null || Array.isArray(definition))
    return {
      problem: {
        field,
        value: definition,
        reason: "must be an object with one or more of dates, weekly, ranges, ics",
      },
    };
  const raw = definition as Record<string, unknown>;
  const unknown = Object.keys(raw).filter((key) => !CALENDAR_KEYS.has(key));
  if (unknown.length > 0)
    return {
      problem: {
        field,
        value: definition,
        reason: `unknown key(s) ${unknown.join(", ")}; use dates, weekly, ranges, ics`,
      },
    };
  if (Object.keys(raw).length === 0)
    return { problem: { field, value: definition, reason: "is empty; give dates, weekly, ranges or ics" } };
  const calendar: Calendar = { name };
  for (const [key, read] of [
    ["dates", readDates],
    ["weekly", readWeekly],
    ["ranges", readRanges],
  ] as const) {
    if (raw[key] === undefined) continue;
    const list = listOf(raw[key], `${field}.${key}`);
    if ("problem" in list) return list;
    const result = read(list.items, `${field}.${key}`);
    if ("problem" in result) return result;
    Object.assign(calendar, { [key]: result.value });
  }
  if (raw.ics !== undefined) {
    const ics = readIcsField(raw.ics, `${field}.ics`, readFile);
    if ("problem" in ics) return ics;
    calendar.events = ics.events;
  }
  return { calendar };
}

function listOf(value: unknown, field: string): { items: unknown[] } | { problem: CalendarProblem } {
  if (!Array.isArray(value)) return { problem: { field, value, reason: "must be a list" } };
  if (value.length > MAX_ITEMS)
    return {
      problem: { field, value: `(${value.length} items)`, reason: `has more than ${MAX_ITEMS} items` },
    };
  return { items: value };
}

type Read<T> = { value: T } | { problem: CalendarProblem };

function readDates(items: unknown[], field: string): Read<string[]> {
  const dates: string[] = [];
  for (const [index, item] of items.entries()) {
    if (typeof item !== "string" || wallOf(item, DATE) === undefined)
      return {
        problem: {
          field: `${field}[${index}]`,
          value: item,
          reason: 'must be a real date "YYYY-MM-DD" (the date in the task\'s timezone), such as "2026-12-25"',
        },
      };
    dates.push(item);
  }
  return { value: [...new Set(dates)].sort() };
}

function readWeekly(items: unknown[], field: string): Read<{ from: number; to: number }[]> {
  const windows: { from: number; to: number }[] = [];
  for (const [index, item] of items.entries()) {
    const at = `${field}[${index}]`;
    const raw = typeof item === "object" && item !== null ? (item as Record<string, unknown>) : undefined;
    const keys = raw ? Object.keys(raw).sort().join(",") : "";
    if (!raw || keys !== "from,to")
      return {
        problem: {
          field: at,
          value: item,
          reason: 'must be { from: "Fri 18:00", to: "Mon 06:00" } (a weekday and a time each)',
        },
      };
    const from = minuteOfWeek(raw.from);
    const to = minuteOfWeek(raw.to);
    if (from === undefined || to === undefined) {
      const bad = from === undefined ? "from" : "to";
      return {
        problem: {
          field: `${at}.${bad}`,
          value: raw[bad],
          reason: 'must be a weekday (Mon-Sun) and a 24-hour time HH:MM, such as "Fri 18:00"',
        },
      };
    }
    if (from === to)
      return {
        problem: {
          field: at,
          value: item,
          reason: "from and to are the same time: a window needs a length (less than a week)",
        },
      };
    windows.push({ from, to });
  }
  return { value: windows };
}

/** "Fri 18:00" -> minutes from Monday 00:00. */
function minuteOfWeek(value: unknown): number | undefined {
  if (typeof value !== "string") return undefined;
  const match = /^([A-Za-z]+)\s+(\d{2}):(\d{2})$/.exec(value.trim());
  if (!match) return undefined;
  const day = match[1]?.toLowerCase() ?? "";
  const index = DAYS.indexOf(day) >= 0 ? DAYS.indexOf(day) : DAY_NAMES.indexOf(day);
  const hour = Number(match[2]);
  const minute = Number(match[3]);
  if (index < 0 || hour > 23 || minute > 59) return undefined;
  return index * 1440 + hour * 60 + minute;
}

function readRanges(items: unknown[], field: string): Read<{ from: number; to: number }[]> {
  const ranges: { from: number; to: number }[] = [];
  const reason =
    'must be a date "YYYY-MM-DD" or a local date-time "YYYY-MM-DDTHH:MM" (no offset: the task\'s timezone)';
  for (const [index, item] of items.entries()) {
    const at = `${field}[${index}]`;
    const raw = typeof item === "object" && item !== null ? (item as Record<string, unknown>) : undefined;
    if (!raw || Object.keys(raw).sort().join(",") !== "from,to")
      return {
        problem: {
          field: at,
          value: item,
          reason: 'must be { from: "2026-12-18", to: "2027-01-04" } (a date\'s whole day is in)',
        },
      };
    const from = typeof raw.from === "string" ? wallOf(raw.from, DATE_TIME) : undefined;
    if (from === undefined) return { problem: { field: `${at}.from`, value: raw.from, reason } };
    const to = typeof raw.to === "string" ? wallOf(raw.to, DATE_TIME) : undefined;
    if (to === undefined) return { problem: { field: `${at}.to`, value: raw.to, reason } };
    // a date as `to` includes that whole day
    const end = DATE.test(raw.to as string) ? to + 86_400_000 : to;
    if (end <= from) return { problem: { field: at, value: item, reason: "to is not after from" } };
    ranges.push({ from, to: end });
  }
  return { value: ranges };
}

/** A wall date or date-time string as wall ms, undefined when it is not a real one. */
function wallOf(text: string, pattern: RegExp): number | undefined {
  const match = pattern.exec(text);
  if (!match) return undefined;
  const [year, month, day, hour, minute, second] = match.slice(1).map((part) => Number(part ?? 0));
  const wall = Date.UTC(year ?? 0, (month ?? 1) - 1, day ?? 1, hour ?? 0, minute ?? 0, second ?? 0);
  const date = new Date(wall);
  const real =
    date.getUTCFullYear() === year &&
    date.getUTCMonth() + 1 === month &&
    date.getUTCDate() === day &&
    (hour ?? 0) < 24 &&
    (minute ?? 0) < 60 &&
    (second ?? 0) < 60;
  return real ? wall : undefined;
}

function readIcsField(
  value: unknown,
  field: string,
  readFile: ReadCalendarFile,
): { events: NonNullable<Calendar["events"]> } | { problem: CalendarProblem } {
  if (typeof value !== "string" || value === "")
    return { problem: { field, value, reason: "must be the path of an iCalendar (.ics) file" } };
  let text: string;
  try {
    text = readFile(value);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    return {
      problem: {
        field,
        value,
        reason: `cannot be read (${code ?? (error as Error).message}); a relative path is from the service's working directory (${process.cwd()})`,
      },
    };
  }
  const read = readIcs(text, isKnownTimezone);
  if ("reason" in read) return { problem: { field, value, reason: read.reason } };
  if (read.events.length > MAX_ITEMS)
    return { problem: { field, value, reason: `has ${read.events.length} events, more than ${MAX_ITEMS}` } };
  return { events: read.events };
}

/** An entry's `exclude`: one calendar name or a list of them, each defined and readable. */
export function checkExclude(
  value: unknown,
  parsed: ParsedCalendars,
  hasAfter: boolean,
): { calendars?: Calendar[]; problems: CalendarProblem[] } {
  if (value === undefined) return { problems: [] };
  const names = typeof value === "string" ? [value] : value;
  if (!Array.isArray(names) || names.length === 0 || !names.every((name) => typeof name === "string"))
    return {
      problems: [
        {
          field: "exclude",
          value,
          reason: "must be a calendar name or a list of them, such as [holidays, freeze]",
        },
      ],
    };
  if (hasAfter)
    return {
      problems: [
        {
          field: "exclude",
          value,
          reason:
            'applies to a task with a schedule of its own; a task with "after" runs for its upstreams\' slots: put "exclude" on the upstream',
        },
      ],
    };
  const calendars: Calendar[] = [];
  for (const name of [...new Set(names as string[])]) {
    const calendar = parsed.calendars.get(name);
    if (calendar) {
      calendars.push(calendar);
      continue;
    }
    const broken = parsed.unusable ?? parsed.problems.get(name);
    const defined = [...parsed.calendars.keys(), ...parsed.problems.keys()];
    const reason = broken
      ? `calendar "${name}" is invalid: ${broken.field} ${JSON.stringify(broken.value)?.slice(0, 120)}: ${broken.reason}`
      : `no calendar "${name}" in the document's calendars (${defined.length > 0 ? `defined: ${defined.join(", ")}` : "none is defined"}); define it or fix the name`;
    return { problems: [{ field: "exclude", value, reason }] };
  }
  return { calendars, problems: [] };
}

import ICAL from "ical.js";
import { wallTime } from "./timezoneOffsets.js";

/**
 * Calendars that exclude slots (docs/calendars.md). A task's `exclude:` names calendars of the
 * config document; a slot that falls on an excluded day or in an excluded window is recorded
 * skipped with the calendar's name as the reason (src/engine/runChecks.ts), and the next runs
 * shown by status, `plan` and the timeline leave it out. Pure: the slot and the timezone are
 * arguments; no clock, no I/O.
 *
 * Every time of a calendar except an iCalendar UTC or TZID time is a wall time in the task's own
 * timezone, read with the task's DST rule (src/core/policies/schedule.ts): a calendar date is the
 * date in the task's timezone, so one calendar means the same local days for a task in Berlin and
 * one in New York. Wall times are kept as "wall ms": the local date and time read as if UTC
 * (src/core/policies/timezoneOffsets.ts wallTime).
 */

const DAY_MS = 86_400_000;
const WEEK_MS = 7 * DAY_MS;
/** 1970-01-01 was a Thursday: wall ms + this, modulo a week, counts from Monday 00:00. */
const MONDAY_SHIFT_MS = 3 * DAY_MS;
/** Offset changes are at most a few hours: a jump over a wall-clock window stops this much short of its end. */
const OFFSET_CHANGE_MARGIN_MS = 4 * 3_600_000;
/** Occurrences of one recurrence examined per decision: a daily rule over 270 years, at most. */
const MAX_OCCURRENCES = 100_000;

/** A calendar as the job row stores it (`data.policy.exclude`), compiled from the config. */
export interface Calendar {
  name: string;
  /** Whole days in the task's timezone, "YYYY-MM-DD". */
  dates?: string[];
  /** Weekly windows [from, to) in minutes from Monday 00:00 (0-10079); `to` <= `from` wraps over Sunday midnight. */
  weekly?: { from: number; to: number }[];
  /** Wall-time ranges [from, to) in the task's timezone, wall ms. */
  ranges?: { from: number; to: number }[];
  /** Events of an iCalendar file. */
  events?: CalendarEvent[];
}

/**
 * One VEVENT: `date` (all-day, VALUE=DATE) and `wall` (floating) are wall times in the task's
 * timezone, `zoned` wall times in its TZID, `utc` instants; `start` is wall ms (an instant for
 * `utc`), `durationMs` the event's length; `rrule` repeats it (RFC 5545, from `start`).
 */
export interface CalendarEvent {
  kind: "date" | "wall" | "zoned" | "utc";
  zone?: string;
  start: number;
  durationMs: number;
  rrule?: string;
}

/** The name of the first of `calendars` that excludes the slot `slot` (ms) of a task in `timezone`, or undefined. */
export function excludedBy(
  calendars: readonly Calendar[],
  slot: number,
  timezone: string,
): string | undefined {
  return exclusionAt(calendars, slot, timezone)?.name;
}

/**
 * The first calendar that excludes `slot`, and an instant up to which every time from `slot` on is
 * excluded too (no later than the window's end, earlier by up to an offset change's length):
 * listing the next slots jumps over a holiday instead of stepping through its slots.
 */
export function exclusionAt(
  calendars: readonly Calendar[],
  slot: number,
  timezone: string,
): { name: string; excludedUntil: number } | undefined {
  if (calendars.length === 0) return undefined;
  const wall = wallTime(slot, timezone);
  for (const calendar of calendars) {
    const left = excludedFor(calendar, slot, wall);
    if (left === undefined) continue;
    // wall ms left in the window; the offset may change before its end (by at most a few hours)
    const excludedUntil = left.onWall
      ? slot + Math.max(0, left.ms - OFFSET_CHANGE_MARGIN_MS)
      : slot + left.ms - 1;
    return { name: calendar.name, excludedUntil };
  }
  return undefined;
}

/** The reason a skipped slot's record gives: `excluded by calendar "holidays"`. */
export function exclusionReason(calendar: string): string {
  return `excluded by calendar "${calendar}"`;
}

type Left = { ms: number; onWall: boolean } | undefined;

/** How long the calendar's exclusion of this time lasts from it (ms, on a wall clock or not), undefined: not excluded. */
function excludedFor(calendar: Calendar, slot: number, wall: number): Left {
  const dayStart = wall - (((wall % DAY_MS) + DAY_MS) % DAY_MS);
  if (calendar.dates?.includes(wallDate(wall))) return { ms: dayStart + DAY_MS - wall, onWall: true };
  for (const window of calendar.weekly ?? []) {
    const left = weeklyLeft(window, wall);
    if (left !== undefined) return { ms: left, onWall: true };
  }
  for (const range of calendar.ranges ?? [])
    if (wall >= range.from && wall < range.to) return { ms: range.to - wall, onWall: true };
  for (const event of calendar.events ?? []) {
    const left = eventLeft(event, slot, wall);
    if (left !== undefined) return { ms: left, onWall: event.kind !== "utc" };
  }
  return undefined;
}

/** "YYYY-MM-DD" of a wall time. */
export function wallDate(wall: number): string {
  return new Date(wall).toISOString().slice(0, 10);
}

function weeklyLeft(window: { from: number; to: number }, wall: number): number | undefined {
  const intoWeek = (((wall + MONDAY_SHIFT_MS) % WEEK_MS) + WEEK_MS) % WEEK_MS;
  const from = window.from * 60_000;
  const to = window.to * 60_000;
  const inside = from < to ? intoWeek >= from && intoWeek < to : intoWeek >= from || intoWeek < to;
  if (!inside) return undefined;
  return (((to - intoWeek) % WEEK_MS) + WEEK_MS) % WEEK_MS;
}

function eventLeft(event: CalendarEvent, slot: number, wall: number): number | undefined {
  // the slot on the event's own clock: an instant for UTC, the TZID's wall time, else the task's
  const time =
    event.kind === "utc" ? slot : event.kind === "zoned" ? wallTime(slot, event.zone ?? "UTC") : wall;
  if (time < event.start) return undefined;
  if (!event.rrule)
    return time < event.start + event.durationMs ? event.start + event.durationMs - time : undefined;
  return occurrenceLeft(event, time);
}

/** How long an occurrence of a repeating event that covers `time` (on the event's clock) lasts from it. */
function occurrenceLeft(event: CalendarEvent, time: number): number | undefined {
  const iterator = recurrence(event);
  if (!iterator) return undefined;
  for (let step = 0; step < MAX_OCCURRENCES; step++) {
    let next: ICAL.Time | null;
    try {
      next = iterator.next();
    } catch {
      return undefined; // a rule ical.js read when the config was read and cannot step now: no exclusion
    }
    if (!next) return undefined;
    const start = Date.UTC(next.year, next.month - 1, next.day, next.hour, next.minute, next.second);
    if (start > time) return undefined;
    if (time < start + event.durationMs) return start + event.durationMs - time;
  }
  return undefined;
}

/** The event's occurrences (its start first), read as UTC fields: wall ms or, for `utc`, instants. */
function recurrence(event: CalendarEvent): { next(): ICAL.Time | null } | undefined {
  try {
    const start = new Date(event.start);
    const dtstart = ICAL.Time.fromData({
      year: start.getUTCFullYear(),
      month: start.getUTCMonth() + 1,
      day: start.getUTCDate(),
      hour: start.getUTCHours(),
      minute: start.getUTCMinutes(),
      second: start.getUTCSeconds(),
      isDate: event.kind === "date",
    });
    return ICAL.Recur.fromString(event.rrule ?? "").iterator(dtstart);
  } catch {
    return undefined; // checked when the config was read (src/config/calendarConfig.ts)
  }
}

/** The calendars a job row stores (`data.policy.exclude`), or none; an unreadable value counts as none. */
export function calendarsOf(value: unknown): Calendar[] {
  if (!Array.isArray(value)) return [];
  return value.filter(
    (calendar): calendar is Calendar =>
      typeof calendar === "object" && calendar !== null && typeof calendar.name === "string",
  );
}

/** One text per list of calendars, the same for the same content whatever the key order (jsonb reorders keys). */
export function calendarsKey(calendars: readonly Calendar[] | undefined): string {
  return JSON.stringify(calendars ?? [], (_key, value: unknown) =>
    typeof value === "object" && value !== null && !Array.isArray(value)
      ? Object.fromEntries(Object.entries(value).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)))
      : value,
  );
}

/** How a task's calendars are named in plans, logs and the audit trail: `holidays, freeze` or `none`. */
export function describeCalendars(calendars: readonly Calendar[] | undefined): string {
  return calendars && calendars.length > 0 ? calendars.map((calendar) => calendar.name).join(", ") : "none";
}

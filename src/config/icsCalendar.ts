import ICAL from "ical.js";
import type { CalendarEvent } from "../core/policies/calendar.js";

/**
 * An iCalendar file's events as calendar exclusions (docs/calendars.md, "iCalendar files"),
 * parsed by ical.js (RFC 5545). The subset read: VEVENTs with DTSTART and DTEND or DURATION
 * (an all-day DTSTART;VALUE=DATE alone lasts one day), UTC, TZID (an IANA name) or floating
 * times, and an optional RRULE. What would change which days an event covers and is not read
 * (RDATE, EXDATE, RECURRENCE-ID overrides) refuses the file rather than exclude other days than
 * it says; a cancelled event (STATUS:CANCELLED) excludes nothing.
 */

const DAY_MS = 86_400_000;
const REFUSED_PROPERTIES = ["rdate", "exdate", "recurrence-id"];

export type IcsRead = { events: CalendarEvent[] } | { reason: string };

export function readIcs(text: string, knownTimezone: (zone: string) => boolean): IcsRead {
  let root: ICAL.Component;
  try {
    root = new ICAL.Component(ICAL.parse(text));
  } catch (error) {
    return { reason: `is not an iCalendar file: ${(error as Error).message}` };
  }
  if (root.name !== "vcalendar")
    return { reason: `is not an iCalendar file: it starts with ${root.name.toUpperCase()}, not VCALENDAR` };
  const vevents = root.getAllSubcomponents("vevent");
  if (vevents.length === 0) return { reason: "has no VEVENT" };
  const events: CalendarEvent[] = [];
  for (const [index, vevent] of vevents.entries()) {
    let read: ReturnType<typeof readEvent>;
    try {
      read = readEvent(vevent, knownTimezone);
    } catch (error) {
      read = (error as Error).message; // ical.js throws on a value it cannot read (a date-time "2026x")
    }
    const summary = vevent.getFirstPropertyValue("summary");
    const which = `VEVENT ${index + 1}${typeof summary === "string" ? ` ("${summary.slice(0, 60)}")` : ""}`;
    if (typeof read === "string") return { reason: `${which}: ${read}` };
    if (read) events.push(read);
  }
  return { events };
}

/** One VEVENT as an exclusion, undefined for a cancelled one, or the reason it cannot be read. */
function readEvent(
  vevent: ICAL.Component,
  knownTimezone: (zone: string) => boolean,
): CalendarEvent | undefined | string {
  if (String(vevent.getFirstPropertyValue("status") ?? "").toUpperCase() === "CANCELLED") return undefined;
  const refused = REFUSED_PROPERTIES.find((name) => vevent.hasProperty(name));
  if (refused) return `${refused.toUpperCase()} is not supported; list such days as events of their own`;
  const dtstart = vevent.getFirstProperty("dtstart");
  if (!dtstart) return "has no DTSTART";
  for (const name of ["dtstart", "dtend"]) {
    const property = vevent.getFirstProperty(name);
    if (property && !realValue(property.toICALString()))
      return `${name.toUpperCase()} ${JSON.stringify(property.toICALString())} is not a real date or date-time`;
  }
  const event = new ICAL.Event(vevent);
  const start = event.startDate;
  if (!realTime(start))
    return `DTSTART ${JSON.stringify(dtstart.toICALString())} is not a real date or date-time`;
  const tzid = dtstart.getParameter("tzid");
  const zone = typeof tzid === "string" ? tzid : undefined;
  if (zone !== undefined && !knownTimezone(zone))
    return `TZID "${zone}" is not an IANA timezone this runtime knows (such as "Europe/Berlin")`;
  const kind: CalendarEvent["kind"] = start.isDate
    ? "date"
    : start.zone?.tzid === "UTC"
      ? "utc"
      : zone !== undefined
        ? "zoned"
        : "wall";
  const startMs = fieldsMs(start);
  let durationMs: number;
  if (vevent.hasProperty("dtend") || vevent.hasProperty("duration")) {
    const end = event.endDate;
    if (!realTime(end)) return "DTEND is not a real date or date-time";
    // DTEND is on DTSTART's clock (RFC 5545 3.6.1); a DURATION is added to it
    durationMs = fieldsMs(end) - startMs;
  } else durationMs = start.isDate ? DAY_MS : 0;
  if (durationMs <= 0)
    return start.isDate || vevent.hasProperty("dtend") || vevent.hasProperty("duration")
      ? "ends at or before its start"
      : "a timed event needs DTEND or DURATION to exclude a window";
  const rrule = vevent.getFirstPropertyValue("rrule");
  const result: CalendarEvent = { kind, start: startMs, durationMs };
  if (zone !== undefined && kind === "zoned") result.zone = zone;
  if (rrule) {
    const text = rrule.toString();
    try {
      const recur = ICAL.Recur.fromString(text);
      recur.iterator(start).next();
    } catch (error) {
      return `RRULE ${JSON.stringify(text)} is invalid: ${(error as Error).message}`;
    }
    result.rrule = text;
  }
  return result;
}

/** A DTSTART/DTEND line's value is a date or date-time that exists (ical.js moves Feb 30 to Mar 2). */
function realValue(line: string): boolean {
  const match = /:(\d{4})(\d{2})(\d{2})(?:T(\d{2})(\d{2})(\d{2})Z?)?$/.exec(line);
  if (!match) return false;
  const [year, month, day, hour, minute, second] = match.slice(1).map((part) => Number(part ?? 0));
  const date = new Date(Date.UTC(year ?? 0, (month ?? 1) - 1, day ?? 1));
  return (
    date.getUTCFullYear() === year &&
    date.getUTCMonth() + 1 === month &&
    date.getUTCDate() === day &&
    (hour ?? 0) < 24 &&
    (minute ?? 0) < 60 &&
    (second ?? 0) < 61
  );
}

function realTime(time: ICAL.Time | undefined): time is ICAL.Time {
  if (!time) return false;
  const fields = [time.year, time.month, time.day, time.hour, time.minute, time.second];
  return fields.every((field) => Number.isInteger(field)) && Number.isFinite(fieldsMs(time));
}

/** An ICAL.Time's fields read as UTC: wall ms (an instant for a UTC time). */
function fieldsMs(time: ICAL.Time): number {
  return Date.UTC(time.year, time.month - 1, time.day, time.hour, time.minute, time.second);
}

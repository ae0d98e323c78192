import { CronExpressionParser } from "cron-parser";
import type { Calendar } from "../core/policies/calendar.js";
import { nextSlots, scheduleOf } from "../core/policies/schedule.js";

/**
 * One place for cron rules. Agenda stores whatever it is given and computes next runs with
 * cron-parser (the same version, pinned by a test), so everything Agenda would store silently
 * or run wrongly is refused here, before Agenda ever sees an expression.
 */

export const DEFAULT_MIN_INTERVAL_MS = 60_000;

/** How many upcoming occurrences are sampled to find the shortest gap of an expression. */
const GAP_SAMPLE_SIZE = 64;

export interface CronRules {
  /** Schedules that fire more often than this are refused. */
  minIntervalMs: number;
}

export type ScheduleCheck =
  | { ok: true; cron: string; timezone: string; shortestGapMs: number }
  | { ok: false; field: "cron" | "timezone"; value: string; reason: string };

interface FieldSpec {
  name: string;
  min: number;
  max: number;
}

const SECOND: FieldSpec = { name: "second", min: 0, max: 59 };
const FIVE_FIELDS: FieldSpec[] = [
  { name: "minute", min: 0, max: 59 },
  { name: "hour", min: 0, max: 23 },
  { name: "day of month", min: 1, max: 31 },
  { name: "month", min: 1, max: 12 },
  { name: "day of week", min: 0, max: 7 },
];

const ALIASES = new Set(["@yearly", "@annually", "@monthly", "@weekly", "@daily", "@hourly"]);

/** Answers of isValidTimezone: building an Intl.DateTimeFormat costs ~0.15 ms, 1.5 s for 10,000 entries. */
const timezoneValidity = new Map<string, boolean>();
const TIMEZONE_CACHE_LIMIT = 1_000;

export function isValidTimezone(timezone: string): boolean {
  const known = timezoneValidity.get(timezone);
  if (known !== undefined) return known;
  let valid = /^[A-Za-z]/.test(timezone); // offsets like "+08:00" are not IANA names
  if (valid) {
    try {
      new Intl.DateTimeFormat("en-US", { timeZone: timezone });
    } catch {
      valid = false;
    }
  }
  if (timezoneValidity.size >= TIMEZONE_CACHE_LIMIT) timezoneValidity.clear();
  timezoneValidity.set(timezone, valid);
  return valid;
}

/**
 * Answers of checkSchedule that do not depend on `now`: all but those settled by sampling
 * occurrences (a DST change in the sample can move the shortest gap). Thousands of tasks share few
 * expressions, and parsing one costs about 17 KB of garbage (cron-parser with luxon): 170 MB for
 * a config of 10,000 tasks, checked again at each change (docs/design.md, "Memory").
 */
const scheduleChecks = new Map<string, ScheduleCheck>();
const SCHEDULE_CACHE_LIMIT = 1_000;

/** Whether checkSchedule answers this one without `now` (its answer is kept): a check of it stands at any time. */
export function scheduleCheckStands(cron: string, timezone: string, rules: CronRules): boolean {
  return scheduleChecks.has(`${rules.minIntervalMs}\n${String(timezone)}\n${cron}`);
}

/** Checks a cron expression and timezone; `now` is where the gap sampling starts. */
export function checkSchedule(cron: string, timezone: string, rules: CronRules, now: Date): ScheduleCheck {
  const key = `${rules.minIntervalMs}\n${String(timezone)}\n${cron}`;
  const known = scheduleChecks.get(key);
  if (known) return known;
  const { check, sampled } = decideSchedule(cron, timezone, rules, now);
  if (!sampled) {
    if (scheduleChecks.size >= SCHEDULE_CACHE_LIMIT) scheduleChecks.clear();
    scheduleChecks.set(key, check);
  }
  return check;
}

function decideSchedule(
  cron: string,
  timezone: string,
  rules: CronRules,
  now: Date,
): { check: ScheduleCheck; sampled: boolean } {
  const settled = (check: ScheduleCheck) => ({ check, sampled: false });
  if (typeof timezone !== "string" || !isValidTimezone(timezone)) {
    return settled({
      ok: false,
      field: "timezone",
      value: String(timezone),
      reason: 'is not an IANA timezone name (examples: "UTC", "Europe/Berlin", "Asia/Shanghai")',
    });
  }
  const expression = cron.trim().replace(/\s+/g, " ");
  const syntaxProblem = checkSyntax(expression);
  if (syntaxProblem) return settled({ ok: false, field: "cron", value: cron, reason: syntaxProblem });

  let parsed: ReturnType<typeof CronExpressionParser.parse>;
  try {
    parsed = CronExpressionParser.parse(expression, { currentDate: now, tz: timezone });
  } catch (error) {
    return settled({ ok: false, field: "cron", value: cron, reason: (error as Error).message });
  }
  // Sampling occurrences costs ~10 ms per expression (cron-parser with a timezone): a config of
  // thousands of tasks would block the process for seconds. A gap bound read off the fields
  // settles nearly every expression; only those near the limit are sampled.
  let shortestGapMs = gapLowerBound(parsed.fields);
  const sampled = shortestGapMs < rules.minIntervalMs;
  if (sampled) {
    const occurrences = parsed.take(GAP_SAMPLE_SIZE).map((date) => date.toDate());
    if (occurrences.length === 0)
      return { check: { ok: false, field: "cron", value: cron, reason: "never fires" }, sampled };
    shortestGapMs = shortestGap(occurrences);
  }
  if (shortestGapMs < rules.minIntervalMs) {
    return {
      check: {
        ok: false,
        field: "cron",
        value: cron,
        reason: `fires every ${formatMs(shortestGapMs)} at its most frequent, more often than the minimum interval of ${formatMs(rules.minIntervalMs)}`,
      },
      sampled,
    };
  }
  return { check: { ok: true, cron: expression, timezone, shortestGapMs }, sampled };
}

/**
 * The next `count` run times after `from`, as the engine computes them: cron-parser's (Agenda's)
 * with the DST rule of src/core/policies/schedule.ts where cron-parser departs from it; for an
 * `every:` interval, its epoch-anchored slots.
 */
export function nextRunTimes(
  cron: string,
  timezone: string,
  from: Date,
  count: number,
  /** Calendars whose slots are skipped, left out (docs/calendars.md). */
  exclude: readonly Calendar[] = [],
): Date[] {
  // an `every:` interval as stored in the job row ("15 minutes") is not a cron expression
  if (scheduleOf(cron).kind === "cron") CronExpressionParser.parse(cron, { currentDate: from, tz: timezone }); // throws on a bad expression, as before
  return nextSlots(cron, timezone, from.getTime(), count, exclude).map((time) => new Date(time));
}

function checkSyntax(expression: string): string | undefined {
  if (expression.startsWith("@")) {
    return ALIASES.has(expression.toLowerCase())
      ? undefined
      : `unknown alias "${expression}"; use one of ${[...ALIASES].join(", ")} or a 5- or 6-field expression`;
  }
  const parts = expression.split(" ");
  if (parts.length !== 5 && parts.length !== 6) {
    return `has ${parts.length} field${parts.length === 1 ? "" : "s"}; use 5 (minute hour day-of-month month day-of-week) or 6 (with seconds first)`;
  }
  const specs = parts.length === 6 ? [SECOND, ...FIVE_FIELDS] : FIVE_FIELDS;
  for (const [index, part] of parts.entries()) {
    const spec = specs[index] as FieldSpec;
    const problem = checkField(part, spec);
    if (problem) return `${spec.name} field "${part}": ${problem}`;
  }
  return undefined;
}

function checkField(field: string, spec: FieldSpec): string | undefined {
  if (/(^|[^a-z])h([^a-z]|$)/i.test(field)) {
    return '"H" (hashed value) is not supported: its value is not stable across restarts';
  }
  for (const item of field.split(",")) {
    if (item === "") return "has an empty list item";
    const [base = "", step, extra] = item.split("/");
    if (extra !== undefined) return `"${item}" has more than one "/"`;
    if (step !== undefined) {
      if (!/^\d+$/.test(step)) return `step "${step}" is not a whole number`;
      const span = spec.max - spec.min;
      const value = Number(step);
      if (value < 1 || value > span) return `step ${value} is outside 1-${span}`;
    }
    for (const number of base.match(/\d+/g) ?? []) {
      if (/[#]/.test(base)) break; // "5#3": the nth weekday; cron-parser checks it
      const value = Number(number);
      if (value < spec.min || value > spec.max) return `value ${value} is outside ${spec.min}-${spec.max}`;
    }
  }
  return undefined;
}

interface CronFields {
  second: { values: readonly (number | string)[] };
  minute: { values: readonly (number | string)[] };
  hour: { values: readonly (number | string)[] };
}

/**
 * The shortest gap two runs can have, from the finest field that allows more than one value: its
 * smallest step between allowed values, counting the wrap to the next minute/hour/day. Below
 * the finest varying field everything is fixed, so two runs differ by at least its unit.
 * A lower bound: the sample decides when it is under the limit.
 */
function gapLowerBound(fields: CronFields): number {
  const units: Array<[readonly (number | string)[], number, number]> = [
    [fields.second.values, 60, 1_000],
    [fields.minute.values, 60, 60_000],
    [fields.hour.values, 24, 3_600_000],
  ];
  for (const [values, span, unitMs] of units) {
    const sorted = values.filter((value): value is number => typeof value === "number").sort((a, b) => a - b);
    if (sorted.length > 1) {
      let step = span - (sorted.at(-1) as number) + (sorted[0] as number);
      for (let i = 1; i < sorted.length; i++)
        step = Math.min(step, (sorted[i] as number) - (sorted[i - 1] as number));
      // an hour can repeat or vanish at a DST change
      return unitMs === 3_600_000 ? Math.max(0, step - 1) * unitMs : step * unitMs;
    }
  }
  return 23 * 3_600_000; // one run a day at most (a DST day can be 23 h)
}

function shortestGap(occurrences: Date[]): number {
  let shortest = Number.POSITIVE_INFINITY;
  for (let i = 1; i < occurrences.length; i++) {
    const gap = (occurrences[i] as Date).getTime() - (occurrences[i - 1] as Date).getTime();
    if (gap < shortest) shortest = gap;
  }
  return shortest;
}

export function formatMs(ms: number): string {
  if (!Number.isFinite(ms)) return "never";
  if (ms % 3_600_000 === 0) return `${ms / 3_600_000} h`;
  if (ms % 60_000 === 0) return `${ms / 60_000} min`;
  if (ms % 1000 === 0) return `${ms / 1000} s`;
  return `${ms} ms`;
}

import { type CronExpression, CronExpressionParser } from "cron-parser";
import { type Calendar, exclusionAt } from "./calendar.js";
import {
  type OffsetStretch,
  offsetAt,
  offsetChangesBetween,
  offsetStretches,
  wallTime,
} from "./timezoneOffsets.js";
import { type SlotBudget, type WallPattern, wallPatternOf, wallSlots } from "./wallSlots.js";

export { isKnownTimezone, offsetAt, wallTime } from "./timezoneOffsets.js";
export type { SlotBudget } from "./wallSlots.js";

/**
 * When a cron slot falls, with one DST rule (docs/behaviour.md, "DST"). Pure: no clock, no
 * database. Outside the hours around a UTC-offset change the answer is exactly cron-parser's with
 * the timezone (what Agenda computes); near a change the slots are computed from the wall clock:
 *
 * - a cron whose hour field is a wildcard (`*`, `* /n`, `@hourly`) follows the wall clock: no run
 *   for a wall time that a spring-forward skips, a run in both copies of an hour a fall-back repeats;
 * - a fixed-hour cron runs a skipped wall time at the instant it would have had without the
 *   change, i.e. shifted forward by the change's length (02:30 in New York -> 03:30 EDT; 02:15 at
 *   Lord Howe -> 02:45), and a repeated wall time once, at its first occurrence;
 * - two wall slots that land on the same instant run once.
 *
 * Measured with cron-parser 5.10.5 (test/unit/dstSchedule.test.ts): it follows this rule in
 * New York, London and Sydney, but at Lord Howe (a 30-minute shift) it drops a fixed time in the
 * skipped half hour, drops 02:30 (which exists) after the spring-forward, drops the second copy
 * of a repeated half hour, and throws ("loop limit exceeded") for an hourly cron over the
 * fall-back: this module is where those are fixed.
 *
 * nextCronSlot is the rule slot by slot; cronSlotsBetween lists a range's slots under it (the same
 * as nextCronSlot stepped), a stretch of one UTC offset at a time (src/core/policies/timezoneOffsets.ts)
 * over the cron's wall-clock slots (src/core/policies/wallSlots.ts).
 */

const HOUR_MS = 3_600_000;
/** Offset changes are at most a few hours: wall slots this far either side are looked at. */
const TRANSITION_REACH_MS = 4 * HOUR_MS;
/** Wall slots examined near a transition before giving up and answering as cron-parser does. */
const SCAN_LIMIT = 50_000;

/** Whether the cron's hour field is a wildcard (`*` or `* /n`): it then follows the wall clock in a repeated hour. */
export function hourIsWildcard(cron: string): boolean {
  const expression = cron.trim();
  if (expression.startsWith("@")) return expression.toLowerCase() === "@hourly";
  const parts = expression.split(/\s+/);
  const hour = parts.length === 6 ? parts[2] : parts[1];
  return hour?.startsWith("*") === true;
}

/**
 * The instants a wall time `wall` names in `timezone` under the rule above: one normally; for a
 * skipped wall time none (wildcard hour) or its shifted instant; for a repeated one both copies
 * (wildcard hour) or the first.
 */
export function instantsOfWall(wall: number, timezone: string, bothCopies: boolean): number[] {
  const offsets = [
    ...new Set([
      offsetAt(wall - 36 * HOUR_MS, timezone),
      offsetAt(wall, timezone),
      offsetAt(wall + 36 * HOUR_MS, timezone),
    ]),
  ];
  const valid = offsets
    .map((offset) => wall - offset)
    .filter((instant) => wallTime(instant, timezone) === wall)
    .sort((a, b) => a - b);
  const unique = [...new Set(valid)];
  if (unique.length === 0) {
    // skipped by a spring-forward: a wildcard hour follows the wall clock (no run); a fixed time
    // runs at the instant it would have had with the offset before the change
    return bothCopies ? [] : [wall - Math.min(...offsets)];
  }
  return bothCopies ? unique : unique.slice(0, 1);
}

/**
 * Parsed expressions by timezone and cron, reset to each new start: parsing is most of the cost
 * of a next slot (about 90 of 110 us, and most of a 10,000-task start's 1.8 GB of allocations).
 * Callers are synchronous, so one expression is never used by two computations at once.
 */
const parsedCrons = new Map<string, CronExpression>();

/** cron-parser's next slot after `after` with the timezone (Agenda's computation), or undefined when it throws. */
function cronParserNext(cron: string, timezone: string, after: number): number | undefined {
  try {
    const key = `${timezone} ${cron}`;
    let expression = parsedCrons.get(key);
    if (expression) expression.reset(new Date(after));
    else {
      expression = CronExpressionParser.parse(cron, { currentDate: new Date(after), tz: timezone });
      if (parsedCrons.size >= 1_000) parsedCrons.clear();
      parsedCrons.set(key, expression);
    }
    return expression.next().getTime();
  } catch {
    return undefined;
  }
}

/**
 * The latest next slot of each timezone and cron away from offset changes, with the `after`
 * values it holds for: every run of a herd, and the start of a run whose claim already asked
 * (src/engine/jobRepository.ts), gets it without computing. An answer `next` for `after` holds
 * for every `after` up to `next` - 1 when no offset changes from `after` - reach to `next` + 2
 * reaches: each of those takes the fast path below, and cron-parser's first slot after any of
 * them is `next`.
 */
const knownNextSlots = new Map<string, { from: number; next: number }>();

/** Forgets the known next slots (tests compare an answer from them with one computed afresh). */
export function forgetKnownNextSlots(): void {
  knownNextSlots.clear();
}

/** The first slot of `cron` in `timezone` strictly after `after` (ms), under the DST rule; undefined if none. */
export function nextCronSlot(cron: string, timezone: string, after: number): number | undefined {
  const key = `${timezone} ${cron}`;
  const known = knownNextSlots.get(key);
  if (known && after >= known.from && after < known.next) return known.next;
  // cron-parser can spend a second before throwing near a change (Lord Howe): not asked there
  if (offsetChangesBetween(after - TRANSITION_REACH_MS, after + 2 * TRANSITION_REACH_MS, timezone))
    return wallClockNext(cron, timezone, after) ?? cronParserNext(cron, timezone, after);
  const fast = cronParserNext(cron, timezone, after);
  if (
    fast !== undefined &&
    !offsetChangesBetween(after - TRANSITION_REACH_MS, fast + TRANSITION_REACH_MS, timezone)
  ) {
    if (!offsetChangesBetween(fast, fast + 2 * TRANSITION_REACH_MS, timezone)) {
      if (knownNextSlots.size >= 1_000) knownNextSlots.clear();
      knownNextSlots.set(key, { from: after, next: fast });
    }
    return fast;
  }
  return wallClockNext(cron, timezone, after) ?? fast;
}

/** Near an offset change: wall slots from cron-parser in UTC, mapped to instants by the rule. */
function wallClockNext(cron: string, timezone: string, after: number): number | undefined {
  const both = hourIsWildcard(cron);
  const start = wallTime(after, timezone) - TRANSITION_REACH_MS;
  let iterator: ReturnType<typeof CronExpressionParser.parse>;
  try {
    iterator = CronExpressionParser.parse(cron, { currentDate: new Date(start), tz: "UTC" });
  } catch {
    return undefined;
  }
  let best: number | undefined;
  for (let step = 0; step < SCAN_LIMIT; step++) {
    let wall: number;
    try {
      wall = iterator.next().getTime();
    } catch {
      break;
    }
    for (const instant of instantsOfWall(wall, timezone, both)) {
      if (instant > after && (best === undefined || instant < best)) best = instant;
    }
    if (best !== undefined && wall > wallTime(best, timezone) + TRANSITION_REACH_MS) break;
  }
  return best;
}

/** The next `count` slots after `from` under the DST rule. */
export function nextCronSlots(cron: string, timezone: string, from: number, count: number): number[] {
  const slots: number[] = [];
  let after = from;
  while (slots.length < count) {
    const next = nextCronSlot(cron, timezone, after);
    if (next === undefined) break;
    slots.push(next);
    after = next;
  }
  return slots;
}

/**
 * The slots in [from, to] (both inclusive), oldest first, at most `limit` of them (the oldest
 * ones); `complete` says whether every slot of the range is listed (false also when `budget` ran
 * out first). The same slots as stepping nextCronSlot from `from`, found a stretch of one UTC offset at
 * a time: a cron's wall-clock slots (cron-parser in UTC, or arithmetic when they are evenly spaced)
 * shifted by the stretch's offset, with the rule applied where a change starts a stretch.
 */
export function cronSlotsBetween(
  cron: string,
  timezone: string,
  from: number,
  to: number,
  limit: number,
  budget: SlotBudget = { cronSteps: Number.POSITIVE_INFINITY },
): { slots: number[]; complete: boolean } {
  const pattern = wallPatternOf(cron);
  if (!pattern || to < from) return { slots: [], complete: true };
  const range = { from, to, bothCopies: hourIsWildcard(cron) };
  let slots: number[] = [];
  // from a change's reach before `from`: a change just before it still moves slots into the range
  for (const stretch of offsetStretches(timezone, from - TRANSITION_REACH_MS, to)) {
    const found = slotsOfStretch(pattern, stretch, range, limit + 1 - slots.length, budget);
    if (found === undefined) return { slots: slots.slice(0, limit), complete: false };
    if (slots.length === 0) slots = found;
    else for (const slot of found) slots.push(slot);
    if (slots.length > limit) return { slots: slots.slice(0, limit), complete: false };
  }
  return { slots, complete: true };
}

/**
 * One stretch's slots in the range, oldest first, at most `max`; undefined when the budget ran
 * out. Each wall slot of the stretch is its instant minus the offset. Where a change starts the
 * stretch, a fixed-hour cron (not `bothCopies`) runs a wall time a fall-back repeats only in its
 * first copy (the stretch before), and a wall time a spring-forward skips at its instant with the
 * offset before (instantsOfWall's rule).
 */
function slotsOfStretch(
  pattern: WallPattern,
  stretch: OffsetStretch,
  range: { from: number; to: number; bothCopies: boolean },
  max: number,
  budget: SlotBudget,
): number[] | undefined {
  const { start, offset, before } = stretch;
  const low = Math.max(start, range.from);
  const high = Math.min(stretch.end - 1, range.to);
  const changeRule = !range.bothCopies && before !== undefined;
  let slots: number[] = [];
  if (low <= high) {
    const repeatedUntil = changeRule && before > offset ? start + before : Number.NEGATIVE_INFINITY;
    const from = Math.max(low + offset, repeatedUntil);
    const found = wallSlots(pattern, { from, to: high + offset, offset }, max, budget);
    if (found === undefined) return undefined;
    slots = found;
  }
  if (!changeRule || before >= offset) return slots;
  const skippedWalls = {
    from: low + before,
    to: Math.min(start + offset - 1, range.to + before),
    offset: before,
  };
  const skipped = wallSlots(pattern, skippedWalls, max, budget);
  if (skipped === undefined) return undefined;
  return mergeUnique(skipped, slots).slice(0, max);
}

/** Two ascending lists as one, each value once. */
function mergeUnique(a: readonly number[], b: readonly number[]): number[] {
  const merged: number[] = [];
  let i = 0;
  let j = 0;
  while (i < a.length || j < b.length) {
    const next = j >= b.length || (i < a.length && (a[i] as number) <= (b[j] as number)) ? a[i++] : b[j++];
    if (next !== undefined && merged.at(-1) !== next) merged.push(next);
  }
  return merged;
}

/**
 * A job row's `repeat_interval`: a cron expression, or an `every:` interval stored the way Agenda's
 * own human intervals are written ("90 seconds", "15 minutes", "6 hours", "1 day"), which Agenda
 * accepts and which no valid cron expression can be.
 */
export type Schedule =
  | { kind: "cron"; cron: string }
  | { kind: "every"; everyMs: number }
  /** An `at:` one-shot. Its job row has no `repeat_interval` (Agenda runs it once); see atSchedule. */
  | { kind: "at"; at: number };

const AT_PREFIX = "at ";

/**
 * How an `at:` one-shot is named where a schedule string is expected (the desired state, the
 * planner, status): `at 2026-12-01T03:00:00.000Z`. In the job row it is `repeat_interval` NULL,
 * `next_run_at` the time, and `data.policy.at` the time (src/engine/sql.ts armOneShot).
 */
export function atSchedule(at: number): string {
  return `${AT_PREFIX}${new Date(at).toISOString()}`;
}

/** The schedule string of a job row: its repeat_interval, or its one-shot time. */
export function rowSchedule(repeatInterval: string | null | undefined, policy: unknown): string | null {
  if (repeatInterval) return repeatInterval;
  const at =
    typeof policy === "object" && policy !== null ? (policy as Record<string, unknown>).at : undefined;
  return typeof at === "string" && !Number.isNaN(Date.parse(at)) ? atSchedule(Date.parse(at)) : null;
}

const EVERY_UNITS = [
  ["day", 86_400_000],
  ["hour", 3_600_000],
  ["minute", 60_000],
  ["second", 1_000],
] as const;
const STORED_EVERY = /^(\d+) (day|hour|minute|second)s?$/;

/** How an `every:` interval of `everyMs` (a whole number of seconds) is stored in the job row. */
export function storedEvery(everyMs: number): string {
  for (const [unit, size] of EVERY_UNITS)
    if (everyMs % size === 0) return `${everyMs / size} ${unit}${everyMs === size ? "" : "s"}`;
  throw new Error(`an interval of ${everyMs} ms is not a whole number of seconds`);
}

export function scheduleOf(repeatInterval: string): Schedule {
  if (repeatInterval.startsWith(AT_PREFIX)) {
    const at = Date.parse(repeatInterval.slice(AT_PREFIX.length));
    if (!Number.isNaN(at)) return { kind: "at", at };
  }
  const match = STORED_EVERY.exec(repeatInterval);
  if (!match) return { kind: "cron", cron: repeatInterval };
  const size = EVERY_UNITS.find(([unit]) => unit === match[2])?.[1] ?? 1_000;
  return { kind: "every", everyMs: Number(match[1]) * size };
}

/**
 * The next slot after `after` of a stored schedule. An interval is anchored to the Unix epoch
 * (fixed rate, UTC): its slots are the multiples of the interval since 1970-01-01T00:00Z, the
 * same on every instance and across restarts, whatever the timezone.
 */
export function nextSlot(repeatInterval: string, timezone: string, after: number): number | undefined {
  const schedule = scheduleOf(repeatInterval);
  if (schedule.kind === "cron") return nextCronSlot(schedule.cron, timezone, after);
  if (schedule.kind === "at") return schedule.at > after ? schedule.at : undefined;
  return (Math.floor(after / schedule.everyMs) + 1) * schedule.everyMs;
}

/** Slots looked at for next slots that calendars leave in, before giving up (a calendar that excludes them all). */
const MAX_EXCLUDED_STEPS = 10_000;
/** How far ahead next slots that calendars leave in are looked for. */
const MAX_EXCLUDED_AHEAD_MS = 3 * 366 * 86_400_000;

/**
 * The next `count` slots after `from` that will run: a slot one of `exclude`'s calendars excludes
 * is recorded skipped instead (src/core/policies/calendar.ts), so it is left out, and the listing
 * jumps to the end of the calendar's window. At most 3 years ahead.
 */
export function nextSlots(
  repeatInterval: string,
  timezone: string,
  from: number,
  count: number,
  exclude: readonly Calendar[] = [],
): number[] {
  const slots: number[] = [];
  let after = from;
  for (let step = 0; slots.length < count && step < MAX_EXCLUDED_STEPS; step++) {
    const next = nextSlot(repeatInterval, timezone, after);
    if (next === undefined || next > from + MAX_EXCLUDED_AHEAD_MS) break;
    const exclusion = exclusionAt(exclude, next, timezone);
    if (exclusion === undefined) slots.push(next);
    after = Math.max(next, exclusion?.excludedUntil ?? next);
  }
  return slots;
}

/**
 * Slots of a stored schedule in [from, to], oldest first, at most `limit` (the one enumeration of
 * a range: the engine's catch-up and overlap decisions, the timeline's missed slots).
 */
export function slotsBetween(
  repeatInterval: string,
  timezone: string,
  from: number,
  to: number,
  limit: number,
  budget?: SlotBudget,
): { slots: number[]; complete: boolean } {
  const schedule = scheduleOf(repeatInterval);
  if (schedule.kind === "cron") return cronSlotsBetween(schedule.cron, timezone, from, to, limit, budget);
  if (schedule.kind === "at")
    return {
      slots: schedule.at >= from && schedule.at <= to && limit > 0 ? [schedule.at] : [],
      complete: true,
    };
  const slots: number[] = [];
  for (
    let slot = Math.ceil(from / schedule.everyMs) * schedule.everyMs;
    slot <= to;
    slot += schedule.everyMs
  ) {
    if (slots.length >= limit) return { slots, complete: false };
    slots.push(slot);
  }
  return { slots, complete: true };
}

import { type CronExpression, CronExpressionParser } from "cron-parser";

/**
 * A cron's slots on the wall clock, with no timezone: as milliseconds of the same wall time in
 * UTC, where no offset ever changes. src/core/policies/schedule.ts maps them to instants, a
 * stretch of one UTC offset at a time, under its DST rule.
 */

/** Work allowed to a range's enumeration: cron-parser steps (evenly spaced slots are counted, not stepped). */
export interface SlotBudget {
  cronSteps: number;
}

/**
 * A cron's slots on the wall clock (as milliseconds of the same wall time in UTC): cron-parser in
 * UTC, where no offset changes; and, when they are evenly spaced, their period and its phase.
 */
export interface WallPattern {
  expression: CronExpression;
  even: { periodMs: number; phaseMs: number } | undefined;
}

/** Wall patterns by cron (null: the cron does not parse); at most 1,000, then forgotten at once. */
const wallPatterns = new Map<string, WallPattern | null>();

export function wallPatternOf(cron: string): WallPattern | undefined {
  let pattern = wallPatterns.get(cron);
  if (pattern === undefined) {
    try {
      const expression = CronExpressionParser.parse(cron, { tz: "UTC" });
      pattern = { expression, even: evenSpacing(expression) };
    } catch {
      pattern = null;
    }
    if (wallPatterns.size >= 1_000) wallPatterns.clear();
    wallPatterns.set(cron, pattern);
  }
  return pattern ?? undefined;
}

const HOUR_MS = 3_600_000;
const DAY_MS = 24 * HOUR_MS;
/** A wall-clock day's fields, finest first: their number of values, and one value's length. */
const DAY_FIELDS = [
  ["second", 60, 1_000],
  ["minute", 60, 60_000],
  ["hour", 24, HOUR_MS],
] as const;

/**
 * The period of a cron's wall slots when they are evenly spaced: every day, and within the day
 * the finest field with several values steps evenly around its cycle, every coarser one holds all
 * its values, and every finer one holds one (`* /5 * * * *`, `0 * * * *`, `0,30 * * * * *`, `30 2 * * *`).
 */
function evenSpacing(expression: CronExpression): WallPattern["even"] {
  const { fields } = expression;
  if (!fields.dayOfMonth.isWildcard || !fields.month.isWildcard || !fields.dayOfWeek.isWildcard)
    return undefined;
  let phaseMs = 0;
  for (const [index, [name, cycle, unitMs]] of DAY_FIELDS.entries()) {
    const values = fields[name].values as readonly number[];
    const first = values[0] ?? 0;
    if (values.length === 1) {
      phaseMs += first * unitMs;
      continue;
    }
    const step = (values[1] ?? first) - first;
    const even = values.length * step === cycle && values.every((value, at) => value === first + at * step);
    const coarserFull = DAY_FIELDS.slice(index + 1).every(
      ([coarser, coarserCycle]) => fields[coarser].values.length === coarserCycle,
    );
    return even && coarserFull ? { periodMs: step * unitMs, phaseMs: phaseMs + first * unitMs } : undefined;
  }
  return { periodMs: DAY_MS, phaseMs };
}

/**
 * The wall slots in [from, to], at most `max`, each less `offset` (the instants of one stretch of
 * that UTC offset); undefined when `budget` runs out first. Evenly spaced slots are counted from
 * the day's start (every period divides a day); others are stepped.
 */
export function wallSlots(
  pattern: WallPattern,
  range: { from: number; to: number; offset: number },
  max: number,
  budget: SlotBudget,
): number[] | undefined {
  const { from, to, offset } = range;
  const instants: number[] = [];
  if (pattern.even) {
    const { periodMs, phaseMs } = pattern.even;
    const first = from + ((((phaseMs - from) % periodMs) + periodMs) % periodMs);
    for (let wall = first; wall <= to && instants.length < max; wall += periodMs)
      instants.push(wall - offset);
    return instants;
  }
  pattern.expression.reset(new Date(from - 1));
  while (instants.length < max) {
    if (budget.cronSteps <= 0) return undefined;
    budget.cronSteps -= 1;
    let wall: number;
    try {
      wall = pattern.expression.next().getTime();
    } catch {
      return instants; // no later date matches the expression
    }
    if (wall > to) return instants;
    instants.push(wall - offset);
  }
  return instants;
}

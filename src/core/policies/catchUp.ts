/**
 * The catch-up decision (docs/behaviour.md, "Catch-up") as a pure function: a job whose stored
 * slot is older than the grace has missed slots (downtime, an outage, a task disabled and enabled
 * again); the policy says which of them run. It touches nothing: the engine applies the decision
 * at a run's start (src/core/policies/catchUpAtStart.ts).
 */

export type CatchUpRuns = "none" | "latest" | "all";

export interface CatchUpPolicy {
  /** How old a missed slot may be and still run (latest, all). */
  windowMs: number;
  runs: CatchUpRuns;
}

/**
 * The default: a short outage (a deploy, a failover, a database restart) loses no run, and the
 * newest missed slot runs once; a slot older than an hour is skipped, so a daily report enabled
 * again after a week, or an instance started after a weekend down, does not fire at once for a
 * stale slot. Anything else is asked for in the config.
 */
export const DEFAULT_CATCH_UP: CatchUpPolicy = { windowMs: 3_600_000, runs: "latest" };

/** `all` runs at most this many missed slots (the newest of those within the window, oldest first). */
export const CATCH_UP_ALL_CAP = 10;

/** The longest window accepted in the config. */
export const MAX_CATCH_UP_WINDOW_MS = 365 * 24 * 3_600_000;

/** Skipped slots listed one by one per decision; beyond this they are counted. */
export const SKIPPED_LISTED_CAP = 100;

/** Skipped slots counted per decision; beyond this the count says "at least". */
const SKIPPED_COUNT_CAP = 10_000;

/** Slots of `all`'s window enumerated per decision; beyond this only the newest slot runs. */
const WINDOW_ENUMERATION_CAP = 10_000;

/** The slots of a task's schedule, as the engine computes them (src/core/policies/schedule.ts). */
export interface SlotSource {
  /** Slots in [from, to], oldest first, at most `limit` (the oldest); `complete` when all are listed. */
  between(from: number, to: number, limit: number): { slots: number[]; complete: boolean };
  /** The newest slot at or before `time`, if any. */
  newestAtOrBefore(time: number): number | undefined;
}

export interface CatchUpInput {
  policy: CatchUpPolicy;
  /** The slot the job row held when it was locked (`next_run_at`): the first missed one. */
  storedSlot: number;
  now: number;
  /** A slot at most this late is on time, whatever the policy (the missed-slot grace). */
  graceMs: number;
  /**
   * When the task's previous run ended (the row's `last_finished_at`). A slot that fell while that
   * run was still going was not missed "while nothing ran": the overlap decision at that run's end
   * either recorded it (and moved the stored slot past it) or left it owed, so lateness counts
   * from the end of that run.
   */
  previousRunEndedAt?: number | undefined;
  /**
   * The slot the previous run was for (a re-run's: the slot it repeated). Only slots after it can
   * be owed by its lateness: a row whose stored slot was moved back by hand does not run again the
   * slots that ran since.
   */
  previousRunSlot?: number | undefined;
  schedule: SlotSource;
}

export type CatchUpDecision =
  | {
      kind: "on-time";
      /** The next slot is the first one after this time. */
      nextAfter: number;
    }
  | {
      kind: "catch-up";
      /** The slot this run is for, or null: nothing runs now. */
      run: number | null;
      /** Skipped slots, oldest first, at most SKIPPED_LISTED_CAP. */
      skipped: number[];
      /** How many skipped slots in all; `atLeast` when there were too many to count. */
      skippedCount: number;
      atLeast: boolean;
      nextAfter: number;
      /** Why, in words: the reason on each skipped slot's record and in the decision's log line. */
      reason: string;
    };

export function decideCatchUp(input: CatchUpInput): CatchUpDecision {
  const { policy, storedSlot, now, graceMs, schedule } = input;
  if (now - Math.max(storedSlot, input.previousRunEndedAt ?? storedSlot) <= graceMs)
    return decideWithinGrace(input);
  // the stored slot may be no slot of the schedule (a run-now, a row edited by hand): never older than it
  const newest = Math.max(schedule.newestAtOrBefore(now) ?? storedSlot, storedSlot);
  const windowMs = Math.max(policy.windowMs, graceMs);
  const window = formatDuration(policy.windowMs);
  let run: number | null = null;
  let reason: string;
  let nextAfter = now;
  switch (policy.runs) {
    case "none":
      run = now - newest <= graceMs ? newest : null;
      reason = "missed while nothing ran; catchUp.runs is none";
      break;
    case "latest":
      run = now - newest <= windowMs ? newest : null;
      reason =
        run === null
          ? `missed while nothing ran; the newest missed slot is older than the catch-up window (${window})`
          : "missed while nothing ran; catchUp.runs is latest: only the newest missed slot runs";
      break;
    case "all": {
      const inWindow = schedule.between(Math.max(storedSlot, now - windowMs), now, WINDOW_ENUMERATION_CAP);
      if (!inWindow.complete) {
        run = newest;
        reason = `missed while nothing ran; more than ${WINDOW_ENUMERATION_CAP} missed slots within the catch-up window: only the newest runs`;
      } else {
        const runnable = inWindow.slots.slice(-CATCH_UP_ALL_CAP);
        run = runnable[0] ?? null;
        if (run !== null) nextAfter = run;
        reason =
          inWindow.slots.length > CATCH_UP_ALL_CAP
            ? `missed while nothing ran; catchUp.runs is all, capped at the newest ${CATCH_UP_ALL_CAP} missed slots`
            : `missed while nothing ran; older than the catch-up window (${window})`;
      }
      break;
    }
  }
  // everything from the stored slot up to the run (or up to now) is skipped; for `all` the slots
  // after the run are still owed and run next
  const skipped = skippedBetween(input, storedSlot, run === null ? now : run - 1);
  return { kind: "catch-up", run, ...skipped, nextAfter, reason };
}

/**
 * The stored slot is within the grace: it runs, late, whatever the policy. The slots after it that
 * are already past do not (one run now, not a burst), except under `all`, which runs them next,
 * one after the other: each gets its record, `skipped` with the reason, so that every slot between
 * the last run and the next one ends with a run or a record, whatever the length of the stop.
 *
 * Slots after it (and after the previous run's own slot) that fell due while the previous run was
 * still going are owed, not missed: that run started late, and its overlap decision left them to
 * run in order (src/core/policies/overlap.ts). They run one after the other, as under `all`, while
 * the first of them is within the grace; past that they are missed like any other.
 */
function decideWithinGrace(input: CatchUpInput): CatchUpDecision {
  const { policy, storedSlot, now, graceMs, schedule } = input;
  if (policy.runs === "all") return { kind: "on-time", nextAfter: storedSlot };
  // slots after both the stored one and the previous run's own, up to that run's end
  const owedFrom = Math.max(storedSlot, input.previousRunSlot ?? Number.POSITIVE_INFINITY) + 1;
  const owedUntil = Math.min(now, input.previousRunEndedAt ?? storedSlot);
  const owed = schedule.between(owedFrom, owedUntil, 1).slots[0];
  if (owed !== undefined && now - owed <= graceMs) return { kind: "on-time", nextAfter: storedSlot };
  const skipped = skippedBetween(input, storedSlot + 1, now);
  if (skipped.skippedCount === 0 && !skipped.atLeast) return { kind: "on-time", nextAfter: now };
  return {
    kind: "catch-up",
    run: storedSlot,
    ...skipped,
    nextAfter: now,
    reason: `missed while nothing ran; catchUp.runs is ${policy.runs}: the oldest missed slot runs, late but within the missed-slot grace, and the slots after it do not`,
  };
}

/**
 * The schedule's slots in [from, to], listed (up to SKIPPED_LISTED_CAP) and counted, without those
 * that fell while the previous run went on up to its own slot: they ran, or the overlap decision
 * at its end recorded them (a stored slot older than the previous run's is a row moved back by
 * hand, or a start given back). Slots after the previous run's slot that fell while it went on
 * are owed (decideWithinGrace); past the grace they are recorded here. The stored slot itself is
 * always the catch-up's.
 */
function skippedBetween(
  input: CatchUpInput,
  from: number,
  to: number,
): { skipped: number[]; skippedCount: number; atLeast: boolean } {
  const { schedule, storedSlot } = input;
  const ended = input.previousRunEndedAt ?? Number.NEGATIVE_INFINITY;
  const previousSlot = input.previousRunSlot ?? Number.POSITIVE_INFINITY;
  const undecided = (slots: number[]) =>
    slots.filter((slot) => slot === storedSlot || slot > ended || slot > previousSlot);
  const listed = schedule.between(from, to, SKIPPED_LISTED_CAP);
  const skipped = undecided(listed.slots);
  if (listed.complete) return { skipped, skippedCount: skipped.length, atLeast: false };
  const counted = schedule.between(from, to, SKIPPED_COUNT_CAP);
  return { skipped, skippedCount: undecided(counted.slots).length, atLeast: !counted.complete };
}

/** `90s`, `15m`, `6h`, `1d`: whole numbers of one unit (ms, s, m, h, d). */
const DURATION = /^(\d+)(ms|s|m|h|d)$/;
const UNIT_MS: Record<string, number> = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 };

/** A duration of the config in ms, or why it is not one. */
export function parseDuration(value: unknown): { ok: true; ms: number } | { ok: false; reason: string } {
  if (typeof value !== "string")
    return { ok: false, reason: 'must be a duration string such as "90s", "15m", "6h" or "1d"' };
  const text = value.trim();
  if (text.startsWith("-")) return { ok: false, reason: "must not be negative" };
  const match = DURATION.exec(text);
  if (!match)
    return {
      ok: false,
      reason:
        'is not a duration: use a whole number and one unit, ms, s, m, h or d ("90s", "15m", "6h", "1d")',
    };
  const ms = Number(match[1]) * (UNIT_MS[match[2] as string] as number);
  if (!Number.isSafeInteger(ms)) return { ok: false, reason: "is too large" };
  return { ok: true, ms };
}

export function formatDuration(ms: number): string {
  for (const [unit, size] of [
    ["d", 86_400_000],
    ["h", 3_600_000],
    ["m", 60_000],
    ["s", 1_000],
  ] as const)
    if (ms >= size && ms % size === 0) return `${ms / size}${unit}`;
  return `${ms}ms`;
}

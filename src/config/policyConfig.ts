import {
  type CatchUpPolicy,
  type CatchUpRuns,
  DEFAULT_CATCH_UP,
  MAX_CATCH_UP_WINDOW_MS,
  parseDuration,
} from "../core/policies/catchUp.js";
import type { OverlapPolicy } from "../core/policies/overlap.js";
import { MAX_PAUSE_ON_FAILURE } from "../core/policies/pauseOnFailure.js";
import { type CronRules, formatMs } from "./cronValidator.js";
import type { EntryProblem } from "./desiredState.js";

/**
 * The policy fields of a config entry (docs/behaviour.md): `catchUp`, `overlap`, `jitter` and the
 * schedule kinds `every` and `at` beside `cron`, `pauseOnFailure`. Each problem names the field, the value and the
 * reason; an entry with any problem is refused alone and its task keeps its last valid schedule.
 */

export const OVERLAP_VALUES = ["skip", "queueOne", "cancelRunning"] as const;
const CATCH_UP_RUNS: readonly CatchUpRuns[] = ["none", "latest", "all"];
const CATCH_UP_KEYS = new Set(["window", "runs"]);
const MAX_EVERY_MS = 365 * 86_400_000;
const MAX_JITTER_MS = 86_400_000;

export interface PolicyFields {
  /** Set when the entry states it; absent means the default (DEFAULT_CATCH_UP). */
  catchUp?: CatchUpPolicy;
  /** An `every:` interval in ms (the entry's schedule instead of a cron). */
  every?: number;
  /** An `at:` one-shot's time (ms). */
  at?: number;
  /** The jitter in ms. */
  jitterMs?: number;
  overlap?: OverlapPolicy;
  /** Pause after this many failed slots in a row. */
  pauseOnFailure?: number;
}

export interface PolicyCheck {
  fields: PolicyFields;
  problems: EntryProblem[];
}

export function checkPolicyFields(entry: Record<string, unknown>, rules: CronRules): PolicyCheck {
  const problems: EntryProblem[] = [];
  const fields: PolicyFields = {};

  checkScheduleKinds(entry, problems);

  if (entry.every !== undefined) {
    const every = checkEvery(entry.every, rules, problems);
    if (every !== undefined) fields.every = every;
  }

  // an `at` in the past is refused by the planner, which knows whether the task already holds it
  // (a one-shot that has run stays in the config as completed): src/reconcile/reconcilePlan.ts
  if (entry.at !== undefined) {
    const at = parseInstant(entry.at);
    if (!at.ok) problems.push({ field: "at", value: entry.at, reason: at.reason });
    else fields.at = at.time;
  }

  if (entry.catchUp !== undefined) {
    const catchUp = checkCatchUp(entry.catchUp, problems);
    if (catchUp) fields.catchUp = catchUp;
  }

  if (entry.overlap !== undefined) {
    if (typeof entry.overlap !== "string" || !(OVERLAP_VALUES as readonly string[]).includes(entry.overlap))
      problems.push({
        field: "overlap",
        value: entry.overlap,
        reason: `must be one of ${OVERLAP_VALUES.join(", ")}`,
      });
    else fields.overlap = entry.overlap as OverlapPolicy;
  }

  if (entry.jitter !== undefined) {
    const jitter = parseDuration(entry.jitter);
    if (!jitter.ok) problems.push({ field: "jitter", value: entry.jitter, reason: jitter.reason });
    else if (jitter.ms > MAX_JITTER_MS)
      problems.push({ field: "jitter", value: entry.jitter, reason: "is over a day (1d)" });
    else fields.jitterMs = jitter.ms; // checked against the schedule's shortest gap by parseDesiredState
  }

  if (entry.pauseOnFailure !== undefined) {
    const value = entry.pauseOnFailure;
    if (typeof value !== "number" || !Number.isInteger(value))
      problems.push({
        field: "pauseOnFailure",
        value,
        reason: `must be a whole number of failed slots in a row, from 1 to ${MAX_PAUSE_ON_FAILURE} (leave it out to never pause)`,
      });
    else if (value < 1 || value > MAX_PAUSE_ON_FAILURE)
      problems.push({
        field: "pauseOnFailure",
        value,
        reason: `must be from 1 to ${MAX_PAUSE_ON_FAILURE} failed slots in a row (leave it out to never pause)`,
      });
    else fields.pauseOnFailure = value;
  }
  return { fields, problems };
}

/** One schedule per task (cron, every or at), none for a downstream (`after`), and no schedule policy on a downstream. */
function checkScheduleKinds(entry: Record<string, unknown>, problems: EntryProblem[]): void {
  const kinds = (["cron", "every", "at"] as const).filter((key) => entry[key] !== undefined);
  if (kinds.length > 1) {
    problems.push({
      field: kinds.join("+"),
      value: Object.fromEntries(kinds.map((key) => [key, entry[key]])),
      reason: `${kinds.join(" and ")} are both set; a task has one schedule: keep exactly one of cron, every, at`,
    });
  } else if (entry.after !== undefined && (entry.every !== undefined || entry.at !== undefined)) {
    // `after` with `cron` is the dependency graph's to refuse (src/core/dependencies/graph.ts)
    const kind = entry.every !== undefined ? "every" : "at";
    problems.push({
      field: kind,
      value: entry[kind],
      reason: `a task with "after" runs for its upstreams' slots and has no schedule of its own; remove "${kind}" or "after"`,
    });
  } else if (kinds.length === 0 && entry.after === undefined) {
    problems.push({
      field: "cron",
      value: undefined,
      reason:
        'a schedule is required: cron (e.g. "*/5 * * * *"), every (e.g. "15m") or at (e.g. "2026-12-01T03:00:00Z")',
    });
  }

  if (entry.after !== undefined) {
    // a downstream runs when its upstreams settle a slot (docs/dependencies.md): these policies of
    // a schedule of its own have nothing to act on
    for (const key of ["catchUp", "overlap", "jitter"] as const)
      if (entry[key] !== undefined)
        problems.push({
          field: key,
          value: entry[key],
          reason: `applies to a task with a schedule of its own; a task with "after" runs once per slot when its upstreams settle: remove "${key}"`,
        });
  }
}

/** An `every:` duration: whole seconds, at least the minimum interval, at most a year. */
function checkEvery(value: unknown, rules: CronRules, problems: EntryProblem[]): number | undefined {
  const every = parseDuration(value);
  if (!every.ok) problems.push({ field: "every", value, reason: every.reason });
  else if (every.ms <= 0) problems.push({ field: "every", value, reason: "must be longer than 0" });
  else if (every.ms % 1_000 !== 0)
    problems.push({ field: "every", value, reason: "must be a whole number of seconds" });
  else if (every.ms < rules.minIntervalMs)
    problems.push({
      field: "every",
      value,
      reason: `is shorter than the minimum interval of ${formatMs(rules.minIntervalMs)}`,
    });
  else if (every.ms > MAX_EVERY_MS) problems.push({ field: "every", value, reason: "is over a year (365d)" });
  else return every.ms;
  return undefined;
}

function checkCatchUp(value: unknown, problems: EntryProblem[]): CatchUpPolicy | undefined {
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    problems.push({
      field: "catchUp",
      value,
      reason: 'must be an object such as { window: "6h", runs: latest }',
    });
    return undefined;
  }
  const raw = value as Record<string, unknown>;
  const unknown = Object.keys(raw).filter((key) => !CATCH_UP_KEYS.has(key));
  let ok = true;
  if (unknown.length > 0) {
    problems.push({
      field: "catchUp",
      value,
      reason: `unknown key(s) ${unknown.join(", ")}; use window and runs`,
    });
    ok = false;
  }
  let windowMs = DEFAULT_CATCH_UP.windowMs;
  if (raw.window !== undefined) {
    const window = parseDuration(raw.window);
    if (!window.ok) {
      problems.push({ field: "catchUp.window", value: raw.window, reason: window.reason });
      ok = false;
    } else if (window.ms > MAX_CATCH_UP_WINDOW_MS) {
      problems.push({
        field: "catchUp.window",
        value: raw.window,
        reason:
          "is over a year (365d): a slot that old is not caught up; use runs: none to skip missed slots",
      });
      ok = false;
    } else windowMs = window.ms;
  }
  let runs = DEFAULT_CATCH_UP.runs;
  if (raw.runs !== undefined) {
    if (typeof raw.runs !== "string" || !CATCH_UP_RUNS.includes(raw.runs as CatchUpRuns)) {
      problems.push({
        field: "catchUp.runs",
        value: raw.runs,
        reason: `must be one of ${CATCH_UP_RUNS.join(", ")}`,
      });
      ok = false;
    } else runs = raw.runs as CatchUpRuns;
  }
  return ok ? { windowMs, runs } : undefined;
}

/** An ISO 8601 date-time with a UTC offset or Z ("2026-12-01T03:00:00Z"). */
const ISO_INSTANT = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d{1,3})?)?(Z|[+-]\d{2}:\d{2})$/;

function parseInstant(value: unknown): { ok: true; time: number } | { ok: false; reason: string } {
  const reason =
    'must be an ISO 8601 date-time with Z or an offset, such as "2026-12-01T03:00:00Z" or "2026-12-01T04:00:00+01:00"';
  if (typeof value !== "string" || !ISO_INSTANT.test(value)) return { ok: false, reason };
  const time = Date.parse(value);
  if (Number.isNaN(time)) return { ok: false, reason: `is not a real date-time; ${reason}` };
  return { ok: true, time };
}

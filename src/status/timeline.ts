import { CronExpressionParser } from "cron-parser";
import type { Pool } from "pg";
import { nextSlots as nextScheduleSlots, scheduleOf, slotsBetween } from "../core/policies/schedule.js";
import * as tsql from "./timelineSql.js";

/**
 * The timeline: every slot of many tasks over a time range, read from the run records (one index
 * range scan per task, see timelineSql.ts), plus what the records cannot hold: the run in
 * progress, a run cut off and not yet re-run, and the slots no run started for (missed).
 */

export type MarkOutcome = "succeeded" | "failed" | "skipped" | "interrupted" | "missed" | "running";
export const MARK_OUTCOMES: readonly MarkOutcome[] = [
  "succeeded",
  "failed",
  "skipped",
  "interrupted",
  "missed",
  "running",
];
/** Which outcome a bucket of several slots shows: the first of these it holds. */
const SEVERITY: readonly MarkOutcome[] = [
  "failed",
  "interrupted",
  "missed",
  "running",
  "skipped",
  "succeeded",
];

export interface RunMark {
  kind: "run";
  /** The run record's id (GET /runs/:id); null for a missed slot and a cut-off run known from its re-run. */
  id: string | null;
  task: string;
  slot: Date;
  outcome: MarkOutcome;
  startedAt: Date | null;
  finishedAt: Date | null;
  durationMs: number | null;
  /** Start minus slot. */
  latenessMs: number | null;
  attempt: number | null;
  /** False for an attempt its retry policy followed with another. */
  final: boolean;
  trigger: "schedule" | "manual";
  rerunOf: { startedAt: Date | null; instanceId: string | null } | null;
  instanceId: string | null;
  /** Why it was skipped, failed, cut off or missed. */
  reason: string | null;
}

/** Several marks of one task within one bucket (when the range is asked for at a resolution). */
export interface BucketMark {
  kind: "bucket";
  task: string;
  slot: Date;
  until: Date;
  count: number;
  outcomes: Partial<Record<MarkOutcome, number>>;
  outcome: MarkOutcome;
  maxLatenessMs: number | null;
  maxDurationMs: number | null;
  /** A run of the most severe outcome held, to open (GET /runs/:id); null when it has none (missed slots). */
  id: string | null;
}

export type TimelineMark = RunMark | BucketMark;

export interface TimelineQuery {
  from: Date;
  to: Date;
  tasks?: string[] | undefined;
  cursor?: TimelineCursor | undefined;
  /** Run records read per page at most. */
  limit: number;
  /** Marks of one task closer than this are summed into one bucket mark; 0 or absent: every mark. */
  bucketMs?: number | undefined;
}

export interface TimelineCursor {
  task: string;
  slot: string;
  id: string;
}

export interface TimelinePage {
  from: Date;
  to: Date;
  bucketMs: number;
  /** The tasks this page covers, in order; a task may continue on the next page. */
  tasks: string[];
  marks: TimelineMark[];
  /** The next few slots of each covered task that is enabled. */
  upcoming: Record<string, Date[]>;
  /** Tasks whose missed slots were not computed (a schedule too irregular to expand in time). */
  missedUnchecked: string[];
  nextCursor: TimelineCursor | null;
}

export interface TimelineOptions {
  pool: Pool;
  namespace: string;
  /** A slot with no run started this long after it is missed. */
  missedSlotGraceMs: number;
  now?: () => Date;
}

const UPCOMING = 3;
/** With an empty slot: a cursor at the start of a task. */
const TASK_START_ID = "00000000-0000-0000-0000-000000000000";
/** cron-parser costs ~0.1 ms a step: irregular schedules are expanded up to this many slots per request. */
const CRON_STEPS_PER_REQUEST = 20_000;
/** Tasks whose buckets are read at once (of the pool's connections, 10 by default). */
const BUCKET_LOOKAHEAD = 3;

export class UnknownTasksError extends Error {
  constructor(readonly names: string[]) {
    super(`no task named ${names.map((name) => `"${name}"`).join(", ")}`);
  }
}

export async function readTimeline(options: TimelineOptions, query: TimelineQuery): Promise<TimelinePage> {
  const now = options.now?.() ?? new Date();
  const jobs = await tsql.selectTimelineJobs(options.pool);
  const byName = new Map(jobs.map((job) => [job.name, job]));
  let names = query.tasks ? [...new Set(query.tasks)] : jobs.map((job) => job.name);
  const unknown = names.filter((name) => !byName.has(name));
  if (unknown.length > 0) throw new UnknownTasksError(unknown);
  names = names.sort(compare);
  if (query.cursor) {
    const after = query.cursor.task;
    names = names.filter((name) => compare(name, after) >= 0);
  }
  const fromIso = query.from.toISOString();
  const toIso = query.to.toISOString();
  const unfinished = names.filter((name) => {
    const job = byName.get(name);
    return job?.last_run_at && (!job.last_finished_at || job.last_run_at > job.last_finished_at);
  });
  const [lastStarts, lastChanges] = await Promise.all([
    tsql.selectLastStarts(options.pool, unfinished),
    tsql.selectLastChanges(options.pool, options.namespace),
  ]);
  const openRuns = new Map(lastStarts.map((row) => [row.job_name, row]));

  const marks: RunMark[] = [];
  const covered: string[] = [];
  const missedUnchecked: string[] = [];
  const budget = { cronSteps: CRON_STEPS_PER_REQUEST };
  let remaining = query.limit;
  let nextCursor: TimelineCursor | null = null;
  const bucketMs = query.bucketMs ?? 0;
  // with bucketMs: the marks as summed in SQL, and the buckets of one record, to be shown as that record
  const bucketMarks: TimelineMark[] = [];
  const singles: Array<{ at: number; id: string }> = [];

  // with bucketMs the database sums and the page waits on it: the next tasks' sums are asked for
  // ahead (at most BUCKET_LOOKAHEAD at once, with the limit as it is now, which bounds the later one)
  const ahead = new Map<string, Promise<tsql.SlotBucketRow[]>>();
  const buckets = (index: number): Promise<tsql.SlotBucketRow[]> => {
    for (let next = index; next < Math.min(names.length, index + BUCKET_LOOKAHEAD); next++) {
      const task = names[next] as string;
      const job = byName.get(task);
      if (ahead.has(task) || !job) continue;
      const after = query.cursor?.task === task && query.cursor.slot !== "" ? query.cursor : undefined;
      const read = tsql.selectSlotBuckets(options.pool, {
        task,
        from: fromIso,
        to: toIso,
        bucketMs,
        after: after ? { slot: after.slot, id: after.id } : undefined,
        limit: remaining + 1,
        withSlots: !job.disabled && job.repeat_interval !== null,
      });
      // a read ahead past the page's end is dropped: its failure is no one's
      read.catch(() => {});
      ahead.set(task, read);
    }
    return ahead.get(names[index] as string) as Promise<tsql.SlotBucketRow[]>;
  };

  for (const [position, name] of names.entries()) {
    const job = byName.get(name);
    if (!job) continue;
    if (remaining === 0) {
      // the page is full at a task boundary: the next page starts with this task
      nextCursor = { task: name, slot: "", id: TASK_START_ID };
      break;
    }
    const after = query.cursor?.task === name && query.cursor.slot !== "" ? query.cursor : undefined;
    const notBefore = latest(job.created_at, lastChanges.get(name) ?? null);
    const notAfter = new Date(now.getTime() - options.missedSlotGraceMs);
    if (bucketMs > 0) {
      // read with a limit of remaining + 1 or more: its first remaining + 1 rows are this read's
      const rows = (await buckets(position)).slice(0, remaining + 1);
      const full = rows.length > remaining;
      const page = full ? rows.slice(0, remaining) : rows;
      covered.push(name);
      const last = page.at(-1);
      const segmentStart = after ? new Date(after.slot) : query.from;
      const segmentEnd = full && last ? new Date(tsql.slotOf(last.last)) : query.to;
      const sums = new Map<number, BucketSum>();
      const recorded = new Set<number>();
      for (const row of page) {
        const index = Number(row.bucket);
        sums.set(index, bucketSumOfRow(row, index));
        const start = query.from.getTime() + index * bucketMs;
        for (const offset of row.slots ?? []) recorded.add(start + offset);
      }
      const add = (mark: RunMark) =>
        addToBucket(sums, Math.floor((mark.slot.getTime() - query.from.getTime()) / bucketMs), mark);
      const open = openRuns.get(name);
      if (open?.slot && inSegment(new Date(open.slot), segmentStart, segmentEnd, after !== undefined, full)) {
        const mark = openRunMark(open, job, now);
        recorded.add(mark.slot.getTime());
        add(mark);
      }
      const missed = missedSlots(job, {
        start: segmentStart,
        startExclusive: after !== undefined,
        end: segmentEnd,
        endInclusive: full,
        recorded,
        notBefore,
        notAfter,
        budget,
      });
      if (missed === undefined) missedUnchecked.push(name);
      else for (const slot of missed) add(missedMark(name, slot));
      for (const index of [...sums.keys()].sort((a, b) => a - b)) {
        const sum = sums.get(index) as BucketSum;
        if (sum.count === 1 && sum.single) bucketMarks.push(sum.single);
        else if (sum.count === 1 && sum.id) {
          singles.push({ at: bucketMarks.length, id: sum.id });
          bucketMarks.push(bucketMarkOf(name, sum, query.from, bucketMs));
        } else bucketMarks.push(bucketMarkOf(name, sum, query.from, bucketMs));
      }
      remaining -= page.length;
      if (full && last) {
        nextCursor = { task: name, slot: tsql.slotOf(last.last), id: tsql.idOf(last.last) };
        break;
      }
      continue;
    }
    const rows = await tsql.selectSlotRows(options.pool, {
      task: name,
      from: fromIso,
      to: toIso,
      after: after ? { slot: after.slot, id: after.id } : undefined,
      limit: remaining + 1,
    });
    const full = rows.length > remaining;
    const page = full ? rows.slice(0, remaining) : rows;
    covered.push(name);
    const taskMarks = page.flatMap(marksOfRow);
    const last = page.at(-1);
    // this page holds the task's slots after `after` up to its last row (when cut) or to the range end
    const segmentStart = after ? new Date(after.slot) : query.from;
    const segmentEnd = full && last ? new Date(last.slot) : query.to;
    const open = openRuns.get(name);
    if (open?.slot && inSegment(new Date(open.slot), segmentStart, segmentEnd, after !== undefined, full))
      taskMarks.push(openRunMark(open, job, now));
    const missed = missedSlots(job, {
      start: segmentStart,
      startExclusive: after !== undefined,
      end: segmentEnd,
      endInclusive: full,
      recorded: new Set(taskMarks.map((mark) => mark.slot.getTime())),
      notBefore,
      notAfter,
      budget,
    });
    if (missed === undefined) missedUnchecked.push(name);
    else taskMarks.push(...missed.map((slot) => missedMark(name, slot)));
    // by slot only: the records of one slot keep the database's (slot, id) order, which the keyset
    // cursor pages by; a finer order here (by attempt) would differ from page to page at a page's edge
    taskMarks.sort((a, b) => a.slot.getTime() - b.slot.getTime());
    marks.push(...taskMarks);
    remaining -= page.length;
    if (full && last) {
      nextCursor = { task: name, slot: last.slot, id: last.id };
      break;
    }
  }

  const upcoming: Record<string, Date[]> = {};
  for (const name of covered) {
    const job = byName.get(name);
    if (!job || job.disabled || !job.repeat_interval) continue;
    upcoming[name] = nextSlots(job.repeat_interval, job.repeat_timezone ?? "UTC", now, UPCOMING);
  }
  if (singles.length > 0) {
    const rows = await tsql.selectSlotRowsById(
      options.pool,
      singles.map((single) => single.id),
    );
    const byId = new Map(rows.map((row) => [row.id, row]));
    for (const single of singles) {
      const row = byId.get(single.id);
      // a record pruned between the two reads keeps its bucket mark
      if (row) bucketMarks[single.at] = runMark(row);
    }
  }
  return {
    from: query.from,
    to: query.to,
    bucketMs,
    tasks: covered,
    marks: bucketMs > 0 ? bucketMarks : marks,
    upcoming,
    missedUnchecked,
    nextCursor,
  };
}

/** A run record as marks: itself, and for a re-run's first attempt the run it repeats (cut off). */
export function marksOfRow(row: tsql.SlotRow): RunMark[] {
  const mark = runMark(row);
  if (!row.rerun || (mark.attempt ?? 1) !== 1) return [mark];
  const startedAt = row.rerun_of?.startedAt ? new Date(row.rerun_of.startedAt) : null;
  const instanceId = row.rerun_of?.instanceId ?? null;
  return [
    {
      kind: "run",
      id: null,
      task: row.job_name,
      slot: mark.slot,
      outcome: "interrupted",
      startedAt,
      finishedAt: null,
      durationMs: null,
      latenessMs: startedAt ? startedAt.getTime() - mark.slot.getTime() : null,
      attempt: null,
      final: true,
      trigger: mark.trigger,
      rerunOf: null,
      instanceId,
      reason: `never finished (its instance${instanceId ? ` ${instanceId}` : ""} stopped or lost the lock); re-run${mark.startedAt ? ` at ${mark.startedAt.toISOString()}` : ""}`,
    },
    mark,
  ];
}

export function runMark(row: tsql.SlotRow): RunMark {
  const slot = new Date(row.slot);
  const startedAt = row.started_at ? new Date(row.started_at) : null;
  const outcome: MarkOutcome =
    row.outcome === "succeeded" || row.outcome === "skipped" || row.outcome === "interrupted"
      ? row.outcome
      : "failed";
  return {
    kind: "run",
    id: row.id,
    task: row.job_name,
    slot,
    outcome,
    startedAt,
    finishedAt: row.finished_at ? new Date(row.finished_at) : row.timestamp,
    durationMs: row.duration,
    latenessMs: startedAt ? startedAt.getTime() - slot.getTime() : null,
    attempt: row.attempt === null ? null : Number(row.attempt),
    final: row.event !== "retry",
    trigger: row.trigger === "manual" ? "manual" : "schedule",
    rerunOf: row.rerun
      ? {
          startedAt: row.rerun_of?.startedAt ? new Date(row.rerun_of.startedAt) : null,
          instanceId: row.rerun_of?.instanceId ?? null,
        }
      : null,
    instanceId: row.instance_id ?? row.agenda_name,
    reason: outcome === "succeeded" ? null : (row.error ?? row.detail),
  };
}

function openRunMark(open: tsql.LastStartRow, job: tsql.TimelineJobRow, now: Date): RunMark {
  const slot = new Date(open.slot ?? open.timestamp);
  const running = job.locked_at !== null;
  return {
    kind: "run",
    id: open.id,
    task: open.job_name,
    slot,
    outcome: running ? "running" : "interrupted",
    startedAt: open.timestamp,
    finishedAt: null,
    durationMs: running ? Math.max(0, now.getTime() - open.timestamp.getTime()) : null,
    latenessMs: open.timestamp.getTime() - slot.getTime(),
    attempt: null,
    final: true,
    trigger: open.trigger === "manual" ? "manual" : "schedule",
    rerunOf: null,
    instanceId: open.instance_id,
    reason: running
      ? null
      : "never finished (its instance stopped or lost the lock); the next run of the task re-runs this slot",
  };
}

function missedMark(task: string, slot: Date): RunMark {
  return {
    kind: "run",
    id: null,
    task,
    slot,
    outcome: "missed",
    startedAt: null,
    finishedAt: null,
    durationMs: null,
    latenessMs: null,
    attempt: null,
    final: true,
    trigger: "schedule",
    rerunOf: null,
    instanceId: null,
    reason:
      "no run started for this slot (no instance was up, the workers were busy, or the previous run was still going)",
  };
}

function inSegment(
  slot: Date,
  start: Date,
  end: Date,
  startExclusive: boolean,
  endInclusive: boolean,
): boolean {
  const time = slot.getTime();
  const afterStart = startExclusive ? time > start.getTime() : time >= start.getTime();
  const beforeEnd = endInclusive ? time <= end.getTime() : time < end.getTime();
  return afterStart && beforeEnd;
}

/**
 * The slots of the task's current schedule in the segment with no run record, once the slot is
 * past its grace, since the job was created and last re-timed or re-enabled (the audit trail),
 * while it is enabled. Undefined when the schedule is too irregular to expand within the budget.
 */
function missedSlots(
  job: tsql.TimelineJobRow,
  window: {
    start: Date;
    startExclusive: boolean;
    end: Date;
    endInclusive: boolean;
    recorded: Set<number>;
    notBefore: Date | null;
    notAfter: Date;
    budget: { cronSteps: number };
  },
): Date[] | undefined {
  if (job.disabled || !job.repeat_interval) return [];
  const low = Math.max(window.start.getTime(), window.notBefore?.getTime() ?? -Infinity);
  const high = Math.min(window.end.getTime(), window.notAfter.getTime());
  if (high <= low) return [];
  const notBefore = window.notBefore?.getTime() ?? -Infinity;
  const accept = (time: number) =>
    inSegment(new Date(time), window.start, window.end, window.startExclusive, window.endInclusive) &&
    time > notBefore &&
    time <= window.notAfter.getTime() &&
    !window.recorded.has(time);
  const slots = expandSchedule(
    job.repeat_interval,
    job.repeat_timezone ?? "UTC",
    low - 1,
    high,
    window.budget,
  );
  if (slots === undefined) return undefined;
  return slots.filter(accept).map((time) => new Date(time));
}

/** Slot times in (after, until]: arithmetic when the schedule is a fixed period dividing an hour, else cron steps. */
export function expandSchedule(
  cron: string,
  timezone: string,
  after: number,
  until: number,
  budget: { cronSteps: number },
): number[] | undefined {
  if (scheduleOf(cron).kind === "every") {
    // an `every:` interval: arithmetic like a regular cron below, no cron steps
    return slotsBetween(cron, timezone, after + 1, until, Number.POSITIVE_INFINITY).slots;
  }
  let iterator: ReturnType<typeof CronExpressionParser.parse>;
  try {
    iterator = CronExpressionParser.parse(cron, { currentDate: new Date(after), tz: timezone });
  } catch {
    return [];
  }
  const sample = iterator.take(8).map((date) => date.getTime());
  budget.cronSteps -= sample.length;
  const first = sample[0];
  if (first === undefined) return [];
  const period = (sample[1] ?? first) - first;
  const regular =
    period > 0 &&
    period <= 3_600_000 &&
    3_600_000 % period === 0 &&
    sample.every((time, index) => time === first + index * period);
  if (regular) {
    const slots: number[] = [];
    for (let time = first; time <= until; time += period) slots.push(time);
    return slots;
  }
  const slots = sample.filter((time) => time <= until);
  if (slots.length < sample.length) return slots;
  const rest = CronExpressionParser.parse(cron, {
    currentDate: new Date(sample.at(-1) ?? first),
    tz: timezone,
  });
  while (budget.cronSteps > 0) {
    budget.cronSteps -= 1;
    const time = rest.next().getTime();
    if (time > until) return slots;
    slots.push(time);
  }
  return undefined;
}

/** The upcoming slots, as the engine will run them (the DST rule of src/core/policies/schedule.ts). */
function nextSlots(cron: string, timezone: string, after: Date, count: number): Date[] {
  try {
    if (scheduleOf(cron).kind === "cron")
      CronExpressionParser.parse(cron, { currentDate: after, tz: timezone });
    return nextScheduleSlots(cron, timezone, after.getTime(), count).map((time) => new Date(time));
  } catch {
    return [];
  }
}

/** A bucket's marks as summed so far: from SQL (selectSlotBuckets), plus the marks computed here. */
interface BucketSum {
  index: number;
  count: number;
  outcomes: Partial<Record<MarkOutcome, number>>;
  maxLatenessMs: number | null;
  maxDurationMs: number | null;
  id: string | null;
  /** SEVERITY's index of the mark `id` names. */
  idRank: number;
  /** The bucket's only mark when it is not a record read in SQL. */
  single: RunMark | null;
}

function bucketSumOfRow(row: tsql.SlotBucketRow, index: number): BucketSum {
  const outcomes: Partial<Record<MarkOutcome, number>> = {};
  if (row.succeeded > 0) outcomes.succeeded = row.succeeded;
  if (row.skipped > 0) outcomes.skipped = row.skipped;
  if (row.failed > 0) outcomes.failed = row.failed;
  if (row.interrupted > 0) outcomes.interrupted = row.interrupted;
  const worst: MarkOutcome = row.failed > 0 ? "failed" : row.skipped > 0 ? "skipped" : "succeeded";
  return {
    index,
    count: row.records + row.interrupted,
    outcomes,
    // as summarise: at least 0 once any mark has one
    maxLatenessMs: row.max_lateness_ms === null ? null : Math.max(0, row.max_lateness_ms),
    maxDurationMs: row.max_duration_ms === null ? null : Math.max(0, row.max_duration_ms),
    id: tsql.idOf(row.worst),
    idRank: SEVERITY.indexOf(worst),
    single: null,
  };
}

function addToBucket(sums: Map<number, BucketSum>, index: number, mark: RunMark): void {
  let sum = sums.get(index);
  if (!sum) {
    sum = {
      index,
      count: 0,
      outcomes: {},
      maxLatenessMs: null,
      maxDurationMs: null,
      id: null,
      idRank: SEVERITY.length,
      single: mark,
    };
    sums.set(index, sum);
  } else sum.single = null;
  sum.count += 1;
  sum.outcomes[mark.outcome] = (sum.outcomes[mark.outcome] ?? 0) + 1;
  if (mark.latenessMs !== null) sum.maxLatenessMs = Math.max(sum.maxLatenessMs ?? 0, mark.latenessMs);
  if (mark.durationMs !== null) sum.maxDurationMs = Math.max(sum.maxDurationMs ?? 0, mark.durationMs);
  const rank = SEVERITY.indexOf(mark.outcome);
  if (mark.id !== null && rank < sum.idRank) {
    sum.id = mark.id;
    sum.idRank = rank;
  }
}

function bucketMarkOf(task: string, sum: BucketSum, from: Date, bucketMs: number): BucketMark {
  const start = from.getTime() + sum.index * bucketMs;
  return {
    kind: "bucket",
    task,
    slot: new Date(start),
    until: new Date(start + bucketMs),
    count: sum.count,
    outcomes: sum.outcomes,
    outcome: SEVERITY.find((outcome) => sum.outcomes[outcome]) ?? "succeeded",
    maxLatenessMs: sum.maxLatenessMs,
    maxDurationMs: sum.maxDurationMs,
    id: sum.id,
  };
}

function latest(a: Date | null, b: Date | null): Date | null {
  if (!a) return b;
  if (!b) return a;
  return a > b ? a : b;
}

function compare(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

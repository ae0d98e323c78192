import type { Pool } from "pg";
import { calendarsOf } from "../core/policies/calendar.js";
import { nextSlots, type SlotBudget, slotsBetween } from "../core/policies/schedule.js";
import { runTriggerOf } from "../engine/engineApi.js";
import { openSingleRecordBuckets, TaskBuckets } from "./timelineBuckets.js";
import { marksOfRow, missedMark, openRunMark, type RunMark, type TimelineMark } from "./timelineMarks.js";
import * as tsql from "./timelineSql.js";

export type { BucketMark, MarkOutcome, RunMark, TimelineMark } from "./timelineMarks.js";
export { MARK_OUTCOMES } from "./timelineMarks.js";

/**
 * The timeline: every slot of many tasks over a time range, read from the run records (one index
 * range scan per task, see timelineSql.ts), plus what the records cannot hold: the run in
 * progress, a run cut off and not yet re-run, and the slots no run started for (missed), from the
 * one enumeration of a schedule's slots (src/core/policies/schedule.ts).
 */

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
/**
 * The cron steps a request may spend on missed slots: a schedule whose slots are not evenly spaced
 * is stepped slot by slot (src/core/policies/schedule.ts); past this its task is listed in
 * `missedUnchecked`.
 */
const CRON_STEPS_PER_REQUEST = 20_000;
/** Tasks whose buckets are read at once (of the pool's connections, 10 by default). */
const BUCKET_LOOKAHEAD = 3;

export class UnknownTasksError extends Error {
  constructor(readonly names: string[]) {
    super(`no task named ${names.map((name) => `"${name}"`).join(", ")}`);
  }
}

export async function readTimeline(options: TimelineOptions, query: TimelineQuery): Promise<TimelinePage> {
  const page = await openPage(options, query);
  const bucketMs = query.bucketMs ?? 0;
  const read =
    bucketMs > 0
      ? await readTasks(page, bucketReader(page, bucketMs))
      : await readTasks(page, (name, _position, remaining) => readTaskRuns(page, name, remaining));
  return {
    from: query.from,
    to: query.to,
    bucketMs,
    tasks: read.covered,
    marks: bucketMs > 0 ? await openSingleRecordBuckets(options.pool, read.marks) : read.marks,
    upcoming: upcomingSlots(page, read.covered),
    missedUnchecked: read.missedUnchecked,
    nextCursor: read.nextCursor,
  };
}

/** What a page knows before it reads its tasks' records. */
interface PageContext {
  options: TimelineOptions;
  query: TimelineQuery;
  now: Date;
  jobs: Map<string, tsql.TimelineJobRow>;
  /** The page's tasks in name order, from the cursor's task on. */
  names: string[];
  /** The latest start of each task whose last run has not finished. */
  openRuns: Map<string, tsql.LastStartRow>;
  /** Of those, the backfill runs whose slot row is held for them: running, not cut off. */
  heldBackfillRuns: Set<string>;
  /** The last schedule or enable change of each task (the audit trail). */
  lastChanges: Map<string, Date>;
  /** Shared by the page's tasks. */
  budget: SlotBudget;
}

async function openPage(options: TimelineOptions, query: TimelineQuery): Promise<PageContext> {
  const now = options.now?.() ?? new Date();
  const rows = await tsql.selectTimelineJobs(options.pool);
  const jobs = new Map(rows.map((job) => [job.name, job]));
  const names = pageTasks(query, rows, jobs);
  const unfinished = names.filter((name) => {
    const job = jobs.get(name);
    return job?.last_run_at && (!job.last_finished_at || job.last_run_at > job.last_finished_at);
  });
  const [lastStarts, lastChanges] = await Promise.all([
    tsql.selectLastStarts(options.pool, unfinished),
    tsql.selectLastChanges(options.pool, options.namespace),
  ]);
  return {
    options,
    query,
    now,
    jobs,
    names,
    openRuns: new Map(lastStarts.map((row) => [row.job_name, row])),
    heldBackfillRuns: await heldBackfillRuns(options.pool, lastStarts),
    lastChanges,
    budget: { cronSteps: CRON_STEPS_PER_REQUEST },
  };
}

/**
 * The backfill runs among the open starts that are still going: a backfill's runs go on their slot
 * rows, not the task's job row, so its lock says nothing about them (src/status/timelineSql.ts).
 */
async function heldBackfillRuns(
  pool: TimelineOptions["pool"],
  starts: tsql.LastStartRow[],
): Promise<Set<string>> {
  const held = new Set<string>();
  for (const start of starts)
    if (runTriggerOf(start.trigger) === "backfill" && start.slot !== null)
      if (await tsql.selectBackfillSlotHeld(pool, { ...start, slot: start.slot })) held.add(start.id);
  return held;
}

/** The tasks asked for (all by default), each known, in name order from the cursor's task on. */
function pageTasks(
  query: TimelineQuery,
  rows: tsql.TimelineJobRow[],
  jobs: Map<string, tsql.TimelineJobRow>,
): string[] {
  const asked = query.tasks ? [...new Set(query.tasks)] : rows.map((job) => job.name);
  const unknown = asked.filter((name) => !jobs.has(name));
  if (unknown.length > 0) throw new UnknownTasksError(unknown);
  const sorted = asked.sort(compare);
  const after = query.cursor?.task;
  return after === undefined ? sorted : sorted.filter((name) => compare(name, after) >= 0);
}

/** What a page read of one task. */
interface TaskRead {
  marks: TimelineMark[];
  /** Records (or buckets) read: what the page's limit counts. */
  rows: number;
  missedChecked: boolean;
  /** Where the next page starts when the limit cut this task. */
  cut: TimelineCursor | null;
}

type TaskReader = (name: string, position: number, remaining: number) => Promise<TaskRead>;

/** The page's tasks in order until `limit` records (or buckets) are read. */
async function readTasks(
  page: PageContext,
  readTask: TaskReader,
): Promise<{
  covered: string[];
  marks: TimelineMark[];
  missedUnchecked: string[];
  nextCursor: TimelineCursor | null;
}> {
  const read = { covered: [] as string[], marks: [] as TimelineMark[], missedUnchecked: [] as string[] };
  let remaining = page.query.limit;
  for (const [position, name] of page.names.entries()) {
    // the page is full at a task boundary: the next page starts with this task
    if (remaining === 0) return { ...read, nextCursor: { task: name, slot: "", id: TASK_START_ID } };
    const task = await readTask(name, position, remaining);
    read.covered.push(name);
    for (const mark of task.marks) read.marks.push(mark);
    if (!task.missedChecked) read.missedUnchecked.push(name);
    remaining -= task.rows;
    if (task.cut) return { ...read, nextCursor: task.cut };
  }
  return { ...read, nextCursor: null };
}

/** Every mark of a task's segment: its records, the run it re-ran, the run in progress, missed slots. */
async function readTaskRuns(page: PageContext, name: string, remaining: number): Promise<TaskRead> {
  const { query } = page;
  const after = cursorIn(query, name);
  // read one more than the limit left: whether the page cuts this task
  const rows = await tsql.selectSlotRows(page.options.pool, {
    task: name,
    from: query.from.toISOString(),
    to: query.to.toISOString(),
    after,
    limit: remaining + 1,
  });
  const full = rows.length > remaining;
  const kept = full ? rows.slice(0, remaining) : rows;
  const last = kept.at(-1);
  const segment = segmentOf(query, after, full ? last?.slot : undefined);
  const marks = kept.flatMap(marksOfRow);
  const recorded = new Set(marks.map((mark) => mark.slot.getTime()));
  const unrecorded = unrecordedMarks(page, name, segment, recorded);
  marks.push(...unrecorded.marks);
  // by slot only: the records of one slot keep the database's (slot, id) order, which the keyset
  // cursor pages by; a finer order here (by attempt) would differ from page to page at a page's edge
  marks.sort((a, b) => a.slot.getTime() - b.slot.getTime());
  return {
    marks,
    rows: kept.length,
    missedChecked: unrecorded.missedChecked,
    cut: full && last ? { task: name, slot: last.slot, id: last.id } : null,
  };
}

/**
 * A task's segment in buckets: its records summed in SQL, the marks no record holds added here.
 * The database sums and the page waits on it: the next tasks' sums are asked for ahead (at most
 * BUCKET_LOOKAHEAD at once, with the limit as it is now, which bounds the later one).
 */
function bucketReader(page: PageContext, bucketMs: number): TaskReader {
  const ahead = new Map<string, Promise<tsql.SlotBucketRow[]>>();
  return async (name, position, remaining) => {
    for (const task of page.names.slice(position, position + BUCKET_LOOKAHEAD)) {
      if (!ahead.has(task)) ahead.set(task, readBucketRows(page, task, bucketMs, remaining));
    }
    // read with a limit of remaining + 1 or more: its first remaining + 1 rows are this read's
    const rows = (await (ahead.get(name) as Promise<tsql.SlotBucketRow[]>)).slice(0, remaining + 1);
    const full = rows.length > remaining;
    const kept = full ? rows.slice(0, remaining) : rows;
    const last = kept.at(-1);
    const cutSlot = full && last ? tsql.slotOf(last.last) : undefined;
    const buckets = new TaskBuckets(page.query.from, bucketMs);
    buckets.addRows(kept);
    const segment = segmentOf(page.query, cursorIn(page.query, name), cutSlot);
    const unrecorded = unrecordedMarks(page, name, segment, buckets.recorded);
    for (const mark of unrecorded.marks) buckets.addMark(mark);
    return {
      marks: buckets.marks(name),
      rows: kept.length,
      missedChecked: unrecorded.missedChecked,
      cut: cutSlot !== undefined && last ? { task: name, slot: cutSlot, id: tsql.idOf(last.last) } : null,
    };
  };
}

function readBucketRows(
  page: PageContext,
  task: string,
  bucketMs: number,
  remaining: number,
): Promise<tsql.SlotBucketRow[]> {
  const job = page.jobs.get(task);
  const read = tsql.selectSlotBuckets(page.options.pool, {
    task,
    from: page.query.from.toISOString(),
    to: page.query.to.toISOString(),
    bucketMs,
    after: cursorIn(page.query, task),
    limit: remaining + 1,
    withSlots: job !== undefined && !job.disabled && job.repeat_interval !== null,
  });
  // a read ahead past the page's end is dropped: its failure is no one's
  read.catch(() => {});
  return read;
}

/** The cursor's (slot, id) when it is within `task`. */
function cursorIn(query: TimelineQuery, task: string): { slot: string; id: string } | undefined {
  const cursor = query.cursor;
  return cursor?.task === task && cursor.slot !== "" ? { slot: cursor.slot, id: cursor.id } : undefined;
}

/**
 * The part of the range a page covers of one task: after the cursor when it is in this task, to
 * the last record read when the page cuts the task there (that slot included), else to the range's end.
 */
interface Segment {
  start: number;
  startExclusive: boolean;
  end: number;
  endInclusive: boolean;
}

function segmentOf(
  query: TimelineQuery,
  after: { slot: string } | undefined,
  cutSlot: string | undefined,
): Segment {
  return {
    start: after ? Date.parse(after.slot) : query.from.getTime(),
    startExclusive: after !== undefined,
    end: cutSlot !== undefined ? Date.parse(cutSlot) : query.to.getTime(),
    endInclusive: cutSlot !== undefined,
  };
}

function inSegment(time: number, segment: Segment): boolean {
  const afterStart = segment.startExclusive ? time > segment.start : time >= segment.start;
  const beforeEnd = segment.endInclusive ? time <= segment.end : time < segment.end;
  return afterStart && beforeEnd;
}

/**
 * The marks of a task's segment that no record holds: its run in progress (or cut off), then its
 * missed slots, none of them a slot in `recorded` (which gets the run in progress's).
 */
function unrecordedMarks(
  page: PageContext,
  name: string,
  segment: Segment,
  recorded: Set<number>,
): { marks: RunMark[]; missedChecked: boolean } {
  const job = page.jobs.get(name) as tsql.TimelineJobRow;
  const marks: RunMark[] = [];
  const open = page.openRuns.get(name);
  if (open?.slot && inSegment(Date.parse(open.slot), segment)) {
    const mark = openRunMark(open, job, page.now, page.heldBackfillRuns.has(open.id));
    recorded.add(mark.slot.getTime());
    marks.push(mark);
  }
  const missed = missedSlots(job, segment, {
    recorded,
    notBefore:
      latest(job.created_at, page.lastChanges.get(name) ?? null)?.getTime() ?? Number.NEGATIVE_INFINITY,
    notAfter: page.now.getTime() - page.options.missedSlotGraceMs,
    budget: page.budget,
  });
  if (missed === undefined) return { marks, missedChecked: false };
  for (const slot of missed) marks.push(missedMark(name, new Date(slot)));
  return { marks, missedChecked: true };
}

/**
 * The slots of the task's current schedule in the segment with no run record, once the slot is
 * past its grace (`notAfter`), after the job was created and last re-timed or re-enabled (the
 * audit trail, `notBefore`), while it is enabled. Undefined when the budget ran out first.
 */
function missedSlots(
  job: tsql.TimelineJobRow,
  segment: Segment,
  window: { recorded: Set<number>; notBefore: number; notAfter: number; budget: SlotBudget },
): number[] | undefined {
  if (job.disabled || !job.repeat_interval) return [];
  const low = Math.max(segment.start, window.notBefore);
  const high = Math.min(segment.end, window.notAfter);
  if (high <= low) return [];
  let listed: { slots: number[]; complete: boolean };
  try {
    listed = slotsBetween(
      job.repeat_interval,
      job.repeat_timezone ?? "UTC",
      low,
      high,
      Infinity,
      window.budget,
    );
  } catch {
    return []; // a timezone this runtime does not know: the engine cannot run it either
  }
  if (!listed.complete) return undefined;
  return listed.slots.filter(
    (time) =>
      inSegment(time, segment) &&
      time > window.notBefore &&
      time <= window.notAfter &&
      !window.recorded.has(time),
  );
}

/** The next few slots of each covered task that is enabled that will run (a slot its calendars exclude is skipped). */
function upcomingSlots(page: PageContext, covered: string[]): Record<string, Date[]> {
  const upcoming: Record<string, Date[]> = {};
  for (const name of covered) {
    const job = page.jobs.get(name);
    if (!job || job.disabled || !job.repeat_interval) continue;
    try {
      upcoming[name] = nextSlots(
        job.repeat_interval,
        job.repeat_timezone ?? "UTC",
        page.now.getTime(),
        UPCOMING,
        calendarsOf(job.exclude),
      ).map((time) => new Date(time));
    } catch {
      upcoming[name] = [];
    }
  }
  return upcoming;
}

function latest(a: Date | null, b: Date | null): Date | null {
  if (!a) return b;
  if (!b) return a;
  return a > b ? a : b;
}

function compare(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

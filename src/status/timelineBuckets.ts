import type { Pool } from "pg";
import {
  type BucketMark,
  type MarkOutcome,
  type RunMark,
  runMark,
  type TimelineMark,
} from "./timelineMarks.js";
import * as tsql from "./timelineSql.js";

/**
 * The timeline at a resolution: a task's marks summed per bucket of `bucketMs` counted from the
 * range's start. The records are summed in SQL (selectSlotBuckets); the marks no record holds
 * (the run in progress, missed slots) are added here; a bucket of one mark shows that mark.
 */

/** Which outcome a bucket of several slots shows: the first of these it holds. */
const SEVERITY: readonly MarkOutcome[] = [
  "failed",
  "interrupted",
  "missed",
  "running",
  "skipped",
  "succeeded",
];

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

/** One task's buckets of a page, by index from the range's start. */
export class TaskBuckets {
  readonly #sums = new Map<number, BucketSum>();
  /** The slots with a record (for the missed-slot check). */
  readonly recorded = new Set<number>();

  constructor(
    private readonly from: Date,
    private readonly bucketMs: number,
  ) {}

  /** The sums SQL made of the task's records, one row per bucket. */
  addRows(rows: readonly tsql.SlotBucketRow[]): void {
    for (const row of rows) {
      const index = Number(row.bucket);
      this.#sums.set(index, bucketSumOfRow(row, index));
      const start = this.from.getTime() + index * this.bucketMs;
      for (const offset of row.slots ?? []) this.recorded.add(start + offset);
    }
  }

  /** A mark no record holds (the run in progress, a missed slot). */
  addMark(mark: RunMark): void {
    const index = Math.floor((mark.slot.getTime() - this.from.getTime()) / this.bucketMs);
    let sum = this.#sums.get(index);
    if (!sum) {
      sum = emptySum(index, mark);
      this.#sums.set(index, sum);
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

  /** The marks in bucket order: a bucket of one computed mark is that mark. */
  marks(task: string): TimelineMark[] {
    return [...this.#sums.keys()]
      .sort((a, b) => a - b)
      .map((index) => {
        const sum = this.#sums.get(index) as BucketSum;
        return sum.count === 1 && sum.single ? sum.single : this.#bucketMark(task, sum);
      });
  }

  #bucketMark(task: string, sum: BucketSum): BucketMark {
    const start = this.from.getTime() + sum.index * this.bucketMs;
    return {
      kind: "bucket",
      task,
      slot: new Date(start),
      until: new Date(start + this.bucketMs),
      count: sum.count,
      outcomes: sum.outcomes,
      outcome: SEVERITY.find((outcome) => sum.outcomes[outcome]) ?? "succeeded",
      maxLatenessMs: sum.maxLatenessMs,
      maxDurationMs: sum.maxDurationMs,
      id: sum.id,
    };
  }
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

function emptySum(index: number, single: RunMark): BucketSum {
  return {
    index,
    count: 0,
    outcomes: {},
    maxLatenessMs: null,
    maxDurationMs: null,
    id: null,
    idRank: SEVERITY.length,
    single,
  };
}

/**
 * The buckets that hold one record, shown as that record: read by id (a bucket of one from SQL
 * names its record). A record pruned between the two reads keeps its bucket mark.
 */
export async function openSingleRecordBuckets(pool: Pool, marks: TimelineMark[]): Promise<TimelineMark[]> {
  const ids = marks.flatMap((mark) =>
    mark.kind === "bucket" && mark.count === 1 && mark.id !== null ? [mark.id] : [],
  );
  if (ids.length === 0) return marks;
  const byId = new Map((await tsql.selectSlotRowsById(pool, ids)).map((row) => [row.id, row]));
  return marks.map((mark) => {
    const row =
      mark.kind === "bucket" && mark.count === 1 && mark.id !== null ? byId.get(mark.id) : undefined;
    return row ? runMark(row) : mark;
  });
}

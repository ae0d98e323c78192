import { type RunTrigger, runTriggerOf } from "../engine/engineApi.js";
import type { InstanceDeathRow } from "../engine/sql.js";
import type * as tsql from "./timelineSql.js";

/**
 * The marks of the timeline: a run record as a mark, the run it re-ran (cut off), the run in
 * progress, a missed slot; and the bucket of several marks (src/status/timelineBuckets.ts).
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
  trigger: RunTrigger;
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

/**
 * A run record as marks: itself, and for a re-run's first attempt the run it repeats (cut off). An
 * operator's re-run (trigger `rerun`) repeats a run that has its own record, and its own mark.
 */
export function marksOfRow(row: tsql.SlotRow): RunMark[] {
  const mark = runMark(row);
  if (!row.rerun || mark.trigger === "rerun" || (mark.attempt ?? 1) !== 1) return [mark];
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
  // a run that lost its lock is superseded by its taker's re-run, as an interrupted one is
  const outcome: MarkOutcome =
    row.outcome === "lock-lost"
      ? "interrupted"
      : row.outcome === "succeeded" || row.outcome === "skipped" || row.outcome === "interrupted"
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
    trigger: runTriggerOf(row.trigger),
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

/**
 * The latest start of a task with no record after it: running while the job is locked (a backfill
 * run: while its slot row is held for it, `backfillHeld`), else cut off.
 */
export function openRunMark(
  open: tsql.LastStartRow,
  job: tsql.TimelineJobRow,
  now: Date,
  backfillHeld = false,
): RunMark {
  const slot = new Date(open.slot ?? open.timestamp);
  const running = runTriggerOf(open.trigger) === "backfill" ? backfillHeld : job.locked_at !== null;
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
    trigger: runTriggerOf(open.trigger),
    rerunOf: null,
    instanceId: open.instance_id,
    reason: running
      ? null
      : "never finished (its instance stopped or lost the lock); the next run of the task re-runs this slot",
  };
}

export function missedMark(task: string, slot: Date): RunMark {
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

/**
 * An instance found dead by the others' liveness check (src/engine/liveness.ts), at the time its
 * locks were released: the runs it had started were handed over (re-run by another instance). Not
 * a mark of one task's row: the timeline draws it across the plot, naming the tasks handed over.
 */
export interface InstanceDeathMark {
  kind: "instance-death";
  instanceId: string;
  at: Date;
  /** The instance whose check confirmed the death. */
  seenBy: string;
  /** Its last liveness check before it died. */
  lastSeenAt: Date | null;
  handedOver: string[];
}

export function instanceDeathMark(row: InstanceDeathRow): InstanceDeathMark {
  return {
    kind: "instance-death",
    instanceId: row.instance_id,
    at: row.died_at,
    seenBy: row.seen_by,
    lastSeenAt: row.last_seen_at,
    handedOver: row.handed_over,
  };
}

import type { Pool } from "pg";
import { type RunRecord, runTriggerOf } from "../engine/engineApi.js";
import { decodeRunMeta, isRunOutcome, type RunLogMeta } from "../engine/runLogMeta.js";
import { type RunMark, runMark } from "./timelineMarks.js";
import * as tsql from "./timelineSql.js";

/** One attempt in the history: the run record plus its id (for GET /runs/:id) and what it repeats. */
export interface HistoryRun extends RunRecord {
  id: string;
  latenessMs: number | null;
  final: boolean;
  rerunOf: { startedAt: Date | null; instanceId: string | null } | null;
}

export interface HistoryPage {
  /** Newest slot first; a slot's attempts latest first (src/status/timelineSql.ts, HISTORY_ORDER). */
  runs: HistoryRun[];
  /** Pass back as `before` for the next (older) page; null on the last page. */
  nextCursor: tsql.HistoryCursor | null;
}

export async function readHistory(pool: Pool, query: tsql.HistoryQuery): Promise<HistoryPage> {
  const rows = await tsql.selectHistoryPage(pool, { ...query, limit: query.limit + 1 });
  const page = rows.slice(0, query.limit);
  const last = page.at(-1);
  return {
    runs: page.map(historyRun),
    nextCursor:
      rows.length > query.limit && last ? { slot: last.slot, timestamp: last.timestamp, id: last.id } : null,
  };
}

function historyRun(row: tsql.SlotRow): HistoryRun {
  const mark = runMark(row);
  return {
    id: row.id,
    taskName: row.job_name,
    outcome: isRunOutcome(row.outcome) ? row.outcome : "failed",
    scheduledAt: mark.slot,
    startedAt: mark.startedAt,
    finishedAt: mark.finishedAt ?? row.timestamp,
    durationMs: row.duration,
    error: row.error,
    detail: row.detail,
    instanceId: mark.instanceId,
    attempt: mark.attempt,
    trigger: mark.trigger,
    requestedBy: mark.trigger !== "schedule" ? row.requested_by : null,
    rerun: row.rerun === true,
    latenessMs: mark.latenessMs,
    final: mark.final,
    rerunOf: mark.rerunOf,
  };
}

/** One attempt's record, as a timeline mark holds it (src/status/timelineMarks.ts), with its detail. */
export interface RunDetail extends Omit<RunMark, "kind" | "id" | "slot"> {
  id: string;
  slot: Date | null;
  error: string | null;
  errorStack: string | null;
  /** What the handler logged through ctx.logger during this attempt (kept once it ended). */
  logs: NonNullable<RunLogMeta["logs"]>;
  /** Lines left out past the size limit. */
  logsDropped: number;
  /** For a start: the record of how it ended, when it did. */
  recordId: string | null;
  /** The W3C traceparent of the attempt's span, when it was traced (docs/tracing.md). */
  traceparent: string | null;
  /** Who asked for a run now, a re-run or a backfill (a token's name); null for a scheduled run. */
  requestedBy: string | null;
}

/** A run record by id; a start row answers as running, cut off, or with the id of its record. */
export async function readRunDetail(pool: Pool, id: string): Promise<RunDetail | undefined> {
  const row = await tsql.selectRunDetail(pool, id);
  if (!row) return undefined;
  return row.event === "start" ? startDetail(pool, row) : recordDetail(row);
}

/** A start row: how its run ended when a record of it came before the next start, else running or cut off. */
async function startDetail(pool: Pool, row: tsql.RunDetailRow): Promise<RunDetail> {
  const slot = row.slot ? new Date(row.slot) : null;
  // a backfill's runs of one task go side by side: the same instance's next row of the task is
  // another slot's, so a start of a backfill run is ended only by its own record, which takes the
  // start's id (src/engine/sql/runLog.ts): a start row read by its id has none yet
  const backfill = runTriggerOf(row.trigger) === "backfill";
  const ended = backfill
    ? undefined
    : await tsql.selectOutcomeAfterStart(pool, {
        job_name: row.job_name,
        timestamp: row.timestamp,
        instance_id: row.instance_id ?? row.agenda_name,
      });
  const running = !ended && (backfill ? await holdsBackfillSlot(pool, row) : await isRunning(pool, row));
  return {
    id: row.id,
    task: row.job_name,
    slot,
    outcome: ended
      ? ended.event === "success"
        ? "succeeded"
        : "failed"
      : running
        ? "running"
        : "interrupted",
    startedAt: row.timestamp,
    finishedAt: null,
    durationMs: running ? Date.now() - row.timestamp.getTime() : null,
    latenessMs: slot ? row.timestamp.getTime() - slot.getTime() : null,
    attempt: row.attempt === null ? null : Number(row.attempt),
    final: true,
    trigger: runTriggerOf(row.trigger),
    instanceId: row.instance_id ?? row.agenda_name,
    rerunOf: null,
    error: null,
    errorStack: null,
    reason: ended
      ? "this is the run's start; its record has the outcome"
      : running
        ? "running now: its log lines are kept when the attempt ends"
        : "never finished (its instance stopped or lost the lock)",
    logs: [],
    logsDropped: 0,
    recordId: ended?.id ?? null,
    traceparent: decodeRunMeta(row.meta).traceparent ?? null,
    requestedBy: row.trigger && row.trigger !== "schedule" ? row.requested_by : null,
  };
}

/** Whether a backfill run's start is its slot's run in progress: the slot row held by its instance for it. */
async function holdsBackfillSlot(pool: Pool, row: tsql.RunDetailRow): Promise<boolean> {
  if (!row.slot) return false;
  return tsql.selectBackfillSlotHeld(pool, {
    job_name: row.job_name,
    slot: row.slot,
    instance_id: row.instance_id ?? row.agenda_name,
    timestamp: row.timestamp,
  });
}

/** Whether a start with no record after it is its task's run in progress: the latest start, the job locked. */
async function isRunning(pool: Pool, row: tsql.RunDetailRow): Promise<boolean> {
  const job = (await tsql.selectTimelineJobs(pool)).find((candidate) => candidate.name === row.job_name);
  if (!job?.locked_at || !job.last_run_at) return false;
  if (job.last_finished_at && job.last_run_at <= job.last_finished_at) return false;
  const [latest] = await tsql.selectLastStarts(pool, [row.job_name]);
  return latest?.id === row.id;
}

/** A run record: the attempt, its error with the stack, and the lines its handler logged. */
function recordDetail(row: tsql.RunDetailRow): RunDetail {
  const meta = decodeRunMeta(row.meta);
  const mark = runMark(row);
  return {
    id: row.id,
    task: row.job_name,
    slot: mark.slot,
    outcome: mark.outcome,
    startedAt: mark.startedAt,
    finishedAt: mark.finishedAt,
    durationMs: mark.durationMs,
    latenessMs: mark.latenessMs,
    attempt: mark.attempt,
    final: mark.final,
    trigger: mark.trigger,
    instanceId: mark.instanceId,
    rerunOf: mark.rerunOf,
    error: row.error,
    errorStack: meta.errorStack ?? null,
    reason: row.outcome === "skipped" ? row.detail : null,
    logs: meta.logs ?? [],
    logsDropped: meta.logsDropped ?? 0,
    recordId: row.id,
    traceparent: meta.traceparent ?? null,
    requestedBy: mark.trigger !== "schedule" ? row.requested_by : null,
  };
}

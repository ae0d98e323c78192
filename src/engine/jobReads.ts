import type { Pool, PoolClient } from "pg";
import { specOf } from "../core/dependencies/spec.js";
import { type Calendar, calendarsOf } from "../core/policies/calendar.js";
import type { CatchUpPolicy } from "../core/policies/catchUp.js";
import { POLICY_DATA_KEY, policyOfData } from "../core/policies/catchUpAtStart.js";
import type { OverlapPolicy } from "../core/policies/overlap.js";
import { pauseOfValue, thresholdOf } from "../core/policies/pauseOnFailure.js";
import { rowSchedule } from "../core/policies/schedule.js";
import type { RunOutcome } from "../core/runTypes.js";
import { type RunRecord, type RunSummary, runTriggerOf, type TaskJob } from "./engineApi.js";
import { decodeRunMeta, isRunOutcome } from "./runLogMeta.js";
import { type JobRow, type RunLogRow, selectRunSummaries, selectTaskJobs } from "./sql.js";

/**
 * Typed reads of the job table and the run log for code outside the engine (the scheduler's
 * status, the `plan` command): they get these shapes, never the SQL rows of src/engine/sql/.
 */

type Queryable = Pool | PoolClient;

/** The one mapping from a job row to the job as the rest of the code (and the planner) reads it. */
export function taskJobOfRow(row: JobRow): TaskJob {
  const pause = pauseOfValue(row.paused);
  return {
    id: row.id,
    name: row.name,
    disabled: row.disabled,
    cron: rowSchedule(row.repeat_interval, row.policy),
    timezone: row.repeat_timezone,
    nextRunAt: row.next_run_at,
    lockedAt: row.locked_at,
    lastRunAt: row.last_run_at,
    lastFinishedAt: row.last_finished_at,
    failCount: row.fail_count ?? 0,
    failReason: row.fail_reason,
    lastModifiedBy: row.last_modified_by,
    after: specOf((row.data as Record<string, unknown> | null | undefined)?.after) ?? null,
    ...(row.policy ? storedPolicyView(row.policy) : {}),
    ...(pause ? { pausedByFailure: pause } : {}),
  };
}

/** The policies of a row as the planner compares them (absent: the defaults). */
function storedPolicyView(policy: unknown): {
  catchUp: CatchUpPolicy;
  jitterMs?: number;
  overlap: OverlapPolicy;
  pauseOnFailure?: number;
  exclude?: Calendar[];
} {
  const stored = policyOfData({ [POLICY_DATA_KEY]: policy });
  const pauseOnFailure =
    typeof policy === "object" && policy !== null
      ? thresholdOf((policy as Record<string, unknown>).pauseOnFailure)
      : undefined;
  const exclude =
    typeof policy === "object" && policy !== null
      ? calendarsOf((policy as Record<string, unknown>).exclude)
      : [];
  return {
    ...(pauseOnFailure === undefined ? {} : { pauseOnFailure }),
    ...(exclude.length > 0 ? { exclude } : {}),
    catchUp: stored.catchUp,
    overlap: stored.overlap,
    ...(stored.jitterMs ? { jitterMs: stored.jitterMs } : {}),
  };
}

/** Every task's job row, by name. */
export async function readTaskJobs(db: Queryable): Promise<TaskJob[]> {
  return (await selectTaskJobs(db)).map(taskJobOfRow);
}

/** Per task job: the latest slots' outcomes and the failure streak (see selectRunSummaries). */
export async function readRunSummaries(db: Queryable, recent: number): Promise<RunSummary[]> {
  const rows = await selectRunSummaries(db, recent);
  return rows.map((row) => {
    const outcomes = (row.recent_outcomes ?? []).map(asOutcome);
    return {
      taskName: row.job_name,
      lastOutcome: outcomes[0] ?? null,
      lastError: row.recent_errors?.[0] ?? null,
      recentOutcomes: outcomes.filter((outcome) => outcome !== null),
      consecutiveFailures: row.consecutive_failures,
      consecutiveFailedAttempts: row.consecutive_failed_attempts,
    };
  });
}

/** One attempt's record as the run history lists it, from its run-log row. */
export function runRecordOfRow(row: RunLogRow): RunRecord {
  const meta = decodeRunMeta(row.meta);
  return {
    taskName: row.job_name,
    outcome: meta.outcome ?? (row.event === "success" ? "succeeded" : "failed"),
    scheduledAt: meta.scheduledAt ?? row.timestamp,
    startedAt: meta.startedAt ?? null,
    finishedAt: meta.finishedAt ?? row.timestamp,
    durationMs: row.duration,
    error: row.error,
    detail: meta.detail ?? null,
    instanceId: meta.instanceId ?? row.agenda_name,
    attempt: meta.attempt ?? null,
    trigger: runTriggerOf(meta.trigger),
    requestedBy: runTriggerOf(meta.trigger) !== "schedule" ? (meta.requestedBy ?? null) : null,
    rerun: meta.rerun === true,
  };
}

/** A run-log row's outcome, or null for one this code does not know. */
function asOutcome(value: string | null | undefined): RunOutcome | null {
  return isRunOutcome(value) ? value : null;
}

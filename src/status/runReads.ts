import type { Pool, PoolClient } from "pg";
import type { RunOutcome } from "../core/runTypes.js";
import type { RunRecord, RunSummary } from "../engine/engineApi.js";
import { decodeRunMeta, isRunOutcome } from "../engine/runLogMeta.js";
import { type RunLogRow, selectRunSummaries, selectRuns } from "./runReadsSql.js";

/**
 * Typed reads of the run log for the status (the scheduler's status listing, a task's runs): they
 * get the engine's shapes (src/engine/engineApi.ts), never its SQL rows.
 */

type Queryable = Pool | PoolClient;

/** How many recent outcomes a status listing carries (the dashboard's strip). */
export const RECENT_OUTCOMES = 10;

/** Finished runs of a task, newest first, from the run log. */
export async function readRuns(db: Queryable, taskName: string, limit = 50): Promise<RunRecord[]> {
  return (await selectRuns(db, taskName, limit)).map(runRecordOfRow);
}

/** Per task job: the latest slots' outcomes and the failure streak (see selectRunSummaries). */
export async function readRunSummaries(db: Queryable, recent = RECENT_OUTCOMES): Promise<RunSummary[]> {
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
    trigger: meta.trigger === "manual" ? "manual" : "schedule",
    requestedBy: meta.trigger === "manual" ? (meta.requestedBy ?? null) : null,
    rerun: meta.rerun === true,
  };
}

/** A run-log row's outcome, or null for one this code does not know. */
function asOutcome(value: string | null | undefined): RunOutcome | null {
  return isRunOutcome(value) ? value : null;
}

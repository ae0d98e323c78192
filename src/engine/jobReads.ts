import type { Pool, PoolClient } from "pg";
import { specOf } from "../core/dependencies/spec.js";
import { type Calendar, calendarsOf } from "../core/policies/calendar.js";
import type { CatchUpPolicy } from "../core/policies/catchUp.js";
import { POLICY_DATA_KEY, policyOfData } from "../core/policies/catchUpAtStart.js";
import type { OverlapPolicy } from "../core/policies/overlap.js";
import { pauseOfValue, thresholdOf } from "../core/policies/pauseOnFailure.js";
import { rowSchedule } from "../core/policies/schedule.js";
import type { TaskJob } from "./engineApi.js";
import { type JobRow, selectTaskJobs } from "./sql.js";

/**
 * The job rows as the reconcile planner reads them (AgendaEngine.listJobs, under the reconcile
 * lock; the `plan` command; the scheduler's status): they get this shape, never the SQL rows of
 * src/engine/sql/. The run log's reads are the read models' (src/status/runReads.ts).
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

/** Every task's job row (or those of `names`), by name. */
export async function readTaskJobs(db: Queryable, names?: readonly string[]): Promise<TaskJob[]> {
  return (await selectTaskJobs(db, names)).map(taskJobOfRow);
}

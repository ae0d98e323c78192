import { metaText } from "../runLogMeta.js";
import { DEPENDENCY_WAITS_TABLE, JOBS_TABLE, LOGS_TABLE, type Queryable } from "./tables.js";

/** A slot's last run record (its start, or its outcome), for a re-run's checks (src/operations/slotReruns.ts). */
export interface SlotLastRunRow {
  event: "start" | "success" | "fail";
  outcome: string | null;
  timestamp: Date;
  started_at: string | null;
  instance_id: string | null;
}

/** The newest start or outcome row of a task's slot (the run log's index by task and slot). */
export async function selectSlotLastRun(
  db: Queryable,
  task: string,
  slot: Date,
): Promise<SlotLastRunRow | undefined> {
  const result = await db.query<SlotLastRunRow>(
    `SELECT event, ${metaText("outcome")} AS outcome, timestamp, ${metaText("startedAt")} AS started_at,
            coalesce(${metaText("instanceId")}, agenda_name) AS instance_id
       FROM "${LOGS_TABLE}"
      WHERE job_name = $1 AND ${metaText("scheduledAt")} = $2 AND event IN ('start', 'success', 'fail')
      ORDER BY timestamp DESC, id DESC LIMIT 1`,
    [task, slot.toISOString()],
  );
  return result.rows[0];
}

export interface RerunGuardRow {
  id: string;
  disabled: boolean;
  locked_at: Date | null;
  pending: boolean;
}

/** The task's job row, locked for the request's transaction: concurrent requests queue here. */
export async function lockJobForRerun(db: Queryable, task: string): Promise<RerunGuardRow | undefined> {
  const result = await db.query<RerunGuardRow>(
    `SELECT id::text AS id, disabled, locked_at, coalesce(data ? 'manualRun', FALSE) AS pending
       FROM "${JOBS_TABLE}" WHERE name = $1 AND type = 'single' FOR UPDATE`,
    [task],
  );
  return result.rows[0];
}

/**
 * The re-run request in the job row: due now, as run now is (src/engine/sql/jobs.ts
 * requestManualRun), carrying the slot it repeats and that slot's last run (`rerun`).
 */
export async function requestRerun(
  db: Queryable,
  jobId: string,
  request: {
    by: string;
    instance: string;
    withDownstream: boolean;
    rerun: { slot: string; startedAt: string; instanceId: string | null };
  },
): Promise<{ id: string; next_run_at: Date }> {
  const result = await db.query<{ id: string; next_run_at: Date }>(
    `UPDATE "${JOBS_TABLE}"
        SET next_run_at = now(),
            data = coalesce(data, '{}'::jsonb) || jsonb_build_object('manualRun',
              jsonb_build_object('requestedAt', now(), 'by', $2::text, 'instance', $3::text,
                'withDownstream', $4::boolean, 'rerun', $5::jsonb))
      WHERE id = $1 RETURNING id::text AS id, next_run_at`,
    [jobId, request.by, request.instance, request.withDownstream, JSON.stringify(request.rerun)],
  );
  const row = result.rows[0];
  if (!row) throw new Error(`the job row ${jobId} vanished while it was locked`);
  return row;
}

/**
 * A slot run again with its downstreams (a re-run, a backfill): the decided waits of its
 * downstreams for that slot are removed, so that the run opens them again (the wait is the
 * exactly-once claim of a downstream's slot: src/engine/sql/dependencies.ts openWait). Waits still
 * open are left: that chain is under way and goes on.
 */
export async function reopenDownstreamWaits(db: Queryable, upstream: string, slot: Date): Promise<number> {
  const result = await db.query(
    `DELETE FROM "${DEPENDENCY_WAITS_TABLE}" WHERE slot = $2 AND $1 = ANY(upstreams) AND state IN ('ran', 'skipped')`,
    [upstream, slot],
  );
  return result.rowCount ?? 0;
}

import { metaHas, metaText } from "../engine/runLogMeta.js";
import { JOBS_TABLE, LOGS_TABLE, type Queryable } from "../engine/sql.js";

/**
 * The run log's reads for the status (src/status/runReads.ts): a task's finished attempts and
 * every task's latest outcomes and failure streak. The run path never reads these.
 */

export interface RunLogRow {
  id: string;
  timestamp: Date;
  event: string;
  job_name: string;
  message: string;
  duration: number | null;
  error: string | null;
  agenda_name: string | null;
  meta: unknown;
}

/** Finished attempts (Agenda's success/fail rows and our failed-then-retried rows) of one task, newest first. */
export async function selectRuns(db: Queryable, name: string, limit: number): Promise<RunLogRow[]> {
  const result = await db.query<RunLogRow>(
    `SELECT id, timestamp, event, job_name, message, duration, error, agenda_name, meta
       FROM "${LOGS_TABLE}"
      WHERE job_name = $1 AND event IN ('success', 'fail', 'retry') AND ${metaHas("outcome")}
      ORDER BY timestamp DESC LIMIT $2`,
    [name, limit],
  );
  return result.rows;
}

export interface RunSummaryRow {
  job_name: string;
  /** The final outcome of each of the latest slots, newest first, and the error of each. */
  recent_outcomes: string[] | null;
  recent_errors: (string | null)[] | null;
  consecutive_failures: number;
  consecutive_failed_attempts: number;
}

/** A failure streak is counted up to this many rows (one index range per task, however long it failed). */
const STREAK_CAP = 10_000;

const OUTCOME_ROW = (alias: string) =>
  `${alias}.event IN ('success', 'fail') AND ${metaHas("outcome", alias)}`;

/** A row's attempt number, 1 when absent or unreadable (rows from old versions). */
const ATTEMPT = (alias: string) =>
  `CASE WHEN ${metaText("attempt", alias)} ~ '^[0-9]+$' THEN (${metaText("attempt", alias)})::int ELSE 1 END`;

/**
 * Per task job, counted in slots, all from `agenda_logs` in one statement (one snapshot), so the
 * figures agree with each other. A slot's outcome is the one of its final outcome row (a
 * `success`/`fail` row; failed attempts that were retried are `retry` rows, and a slot cut off at
 * shutdown and re-run elsewhere has an `interrupted` row superseded by the re-run's): the final
 * outcomes of the last `recent` slots, newest first, with their errors; the failed slots since the
 * last succeeded one (skipped and interrupted slots neither count nor break the streak) and the
 * attempts those slots took (each failed slot's final attempt number). The job row's `fail_count`
 * (Agenda's, in attempts, saved apart from the log) is not read.
 */
export async function selectRunSummaries(db: Queryable, recent: number): Promise<RunSummaryRow[]> {
  const slot = (alias: string) => metaText("scheduledAt", alias);
  const result = await db.query<RunSummaryRow>(
    `SELECT j.name AS job_name, last_slots.outcomes AS recent_outcomes, last_slots.errors AS recent_errors,
            coalesce(streak.slots, 0) AS consecutive_failures,
            coalesce(streak.attempts, 0) AS consecutive_failed_attempts
       FROM "${JOBS_TABLE}" j
       LEFT JOIN LATERAL (
         SELECT array_agg(f.outcome ORDER BY f.timestamp DESC, f.id DESC) AS outcomes,
                array_agg(f.error ORDER BY f.timestamp DESC, f.id DESC) AS errors
           FROM (
             SELECT ${metaText("outcome", "l")} AS outcome, l.error, l.timestamp, l.id
               FROM "${LOGS_TABLE}" l
              WHERE l.job_name = j.name AND ${OUTCOME_ROW("l")}
                AND NOT EXISTS (
                  SELECT 1 FROM "${LOGS_TABLE}" later
                   WHERE later.job_name = l.job_name AND ${slot("later")} = ${slot("l")}
                     AND ${OUTCOME_ROW("later")} AND (later.timestamp, later.id) > (l.timestamp, l.id))
              ORDER BY l.timestamp DESC, l.id DESC LIMIT $1) f) last_slots ON true
       LEFT JOIN LATERAL (
         SELECT count(*)::int AS slots, sum(per_slot.attempts)::int AS attempts FROM (
           SELECT DISTINCT ON (failed.slot) failed.attempts FROM (
             SELECT ${slot("l")} AS slot, ${ATTEMPT("l")} AS attempts, l.timestamp
               FROM "${LOGS_TABLE}" l
              WHERE l.job_name = j.name AND l.event = 'fail' AND ${metaText("outcome", "l")} = 'failed'
                AND l.timestamp > coalesce(
                  (SELECT s.timestamp FROM "${LOGS_TABLE}" s
                    WHERE s.job_name = j.name AND s.event = 'success' AND ${metaText("outcome", "s")} = 'succeeded'
                    ORDER BY s.timestamp DESC LIMIT 1), '-infinity')
              ORDER BY l.timestamp DESC LIMIT ${STREAK_CAP}) failed
            ORDER BY failed.slot, failed.timestamp DESC) per_slot) streak ON true
      WHERE j.type = 'single'`,
    [recent],
  );
  return result.rows;
}

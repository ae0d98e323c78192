import { RUN_META } from "../runLogMeta.js";
import { jsonRecords, jsonTime, LOGS_TABLE, type Queryable } from "./tables.js";

/**
 * The runs in progress: one row per job, the start of its latest run until that run's record is
 * written (src/engine/runRecorder.ts). A finished run is one row in the run log (its record, with
 * the start in `meta.startedAt`, under the id its start had here); a start row in the log is a
 * run that never finished (its instance died), moved there by the job's next start. So the log
 * only grows by inserts, one per run, and this table stays as small as the job table.
 * Schema version 10 (src/engine/schema.ts).
 */
export const RUN_STARTS_TABLE = "cronwarden_run_starts";

export const CREATE_RUN_STARTS = `
  CREATE TABLE IF NOT EXISTS "${RUN_STARTS_TABLE}" (
    job_id      TEXT PRIMARY KEY,
    id          UUID NOT NULL,
    timestamp   TIMESTAMPTZ NOT NULL,
    job_name    TEXT NOT NULL,
    agenda_name TEXT,
    meta        JSONB
  )`;

/**
 * A row's `meta` as stored (`v`: the row being written): without what its columns or other
 * fields already say, since every run adds one: the instance when it is the row's `agenda_name`
 * (readers take `agenda_name` when `meta.instanceId` is absent), and attempt 1 of a run whose
 * handler started (decodeRunMeta reads an absent attempt with `started` as 1).
 */
export const COMPACT_META = `CASE WHEN v.meta IS NULL THEN NULL ELSE v.meta
    - (CASE WHEN v.meta->>'${RUN_META.instanceId}' = v.agenda_name THEN '${RUN_META.instanceId}' ELSE '' END)
    - (CASE WHEN v.meta->>'${RUN_META.attempt}' = '1' AND v.meta->'${RUN_META.started}' = 'true'::jsonb
            THEN '${RUN_META.attempt}' ELSE '' END) END`;

/** The columns of a start, as the run log's start rows have them (selectable from both). */
export const START_COLUMNS = "id, timestamp, job_id, job_name, agenda_name, meta";

/**
 * Every start not followed by its run's record, newest data first: the starts in progress (this
 * table) and the start rows of runs that died (the log), for the readers that look for a run that
 * started and did not finish (`alias`: the rows' name in the caller's statement).
 */
export function unfinishedStarts(alias: string): string {
  return `(SELECT ${START_COLUMNS} FROM "${RUN_STARTS_TABLE}"
           UNION ALL SELECT ${START_COLUMNS} FROM "${LOGS_TABLE}" WHERE event = 'start') ${alias}`;
}

/** One run's start, as the recorder asks for it. */
export interface RunStartInsert {
  id: string;
  timestamp: Date;
  jobId: string;
  jobName: string;
  agendaName: string | null;
  meta: Record<string, unknown>;
}

/**
 * Writes starts (one statement): each becomes its job's row; the row it replaces, a start whose
 * run never wrote its record (the run died), moves into the log as a `start` row, as it was. A
 * start whose record is already in the log (its write came after the record, retried through an
 * outage) is left out. Starts of one job in one batch (a backfill's runs of a task go side by
 * side, src/engine/backfillRunner.ts) keep the latest as the job's row and go to the log as
 * `start` rows, as a replaced start does, so no run in progress is left without its start; its
 * record takes that row's place (insertRunLogRows).
 */
export async function insertRunStarts(db: Queryable, starts: readonly RunStartInsert[]): Promise<void> {
  if (starts.length === 0) return;
  await db.query(
    `WITH batch AS (
       SELECT * FROM jsonb_to_recordset($1::jsonb)
           AS v(id uuid, timestamp timestamptz, job_id text, job_name text, agenda_name text, meta jsonb)
        -- its record came after it (a day's margin for clocks apart): the partitions from then on
        WHERE NOT EXISTS (SELECT 1 FROM "${LOGS_TABLE}" l WHERE l.id = v.id AND l.timestamp >= v.timestamp - interval '1 day')),
     v AS (SELECT DISTINCT ON (job_id) * FROM batch ORDER BY job_id, timestamp DESC),
     -- locked: a record ending one of these starts at the same moment either waits for the move
     -- and then finds the start in the log, or deletes it first and it is not moved (insertRunLogRows)
     previous AS (SELECT s.* FROM "${RUN_STARTS_TABLE}" s JOIN v ON v.job_id = s.job_id AND v.id <> s.id FOR UPDATE OF s),
     moved AS (
       INSERT INTO "${LOGS_TABLE}" (id, timestamp, level, event, job_id, job_name, message, agenda_name, meta)
       SELECT id, timestamp, 'info', 'start', job_id, job_name, 'job started', agenda_name, meta FROM previous
       UNION ALL
       SELECT id, timestamp, 'info', 'start', job_id, job_name, 'job started', agenda_name, ${COMPACT_META}
         FROM batch v WHERE NOT EXISTS (SELECT 1 FROM v latest WHERE latest.id = v.id)
       RETURNING 1)
     INSERT INTO "${RUN_STARTS_TABLE}" (${START_COLUMNS})
     -- after the move (its count is read first): the snapshot's previous starts, not the new ones
     SELECT id, timestamp, job_id, job_name, agenda_name, ${COMPACT_META} FROM v WHERE (SELECT count(*) FROM moved) >= 0
     ON CONFLICT (job_id) DO UPDATE SET id = EXCLUDED.id, timestamp = EXCLUDED.timestamp,
       job_name = EXCLUDED.job_name, agenda_name = EXCLUDED.agenda_name, meta = EXCLUDED.meta`,
    [
      jsonRecords(
        starts.map((start) => ({
          id: start.id,
          timestamp: jsonTime(start.timestamp),
          job_id: start.jobId,
          job_name: start.jobName,
          agenda_name: start.agendaName,
          meta: start.meta,
        })),
      ),
    ],
  );
}

/**
 * The statement that ends runs in progress: the starts that records close (`$1`: a JSON array of
 * `replaces`, `job_id`); returns the ids it deleted.
 */
export const CLOSE_STARTS = `DELETE FROM "${RUN_STARTS_TABLE}" s USING jsonb_to_recordset($1::jsonb) AS v(replaces uuid, job_id text)
   WHERE s.id = v.replaces AND s.job_id = v.job_id RETURNING s.id`;

import type { RunOutcome } from "../../core/runTypes.js";
import { metaHas, metaJson, metaText } from "../runLogMeta.js";
import { LOGS_TABLE, type Queryable } from "./tables.js";

/**
 * Searching the run log (Agenda's job log table, kept as Agenda writes it) by task, outcome, time
 * range and words in a run's error, its skip or failure reason, and its handler's log lines
 * (docs/operations.md, "Search runs").
 *
 * The words are matched by PostgreSQL's full-text search with the `simple` configuration (no
 * stemming, no stop words: "ECONNRESET" and "timeout" match as written, case aside), served by a
 * GIN index on the same expression (SEARCH_INDEX). Full-text search is built into every
 * PostgreSQL: no extension (pg_trgm needs CREATE EXTENSION rights the migrator may not have), and
 * the same plan on the embedded server and on a managed one.
 */

/** The text a run record is searched by: its error, its reason, its log lines' messages. */
const SEARCH_TEXT = `coalesce(error, '') || ' ' || coalesce(${metaText("detail")}, '') || ' ' ||
  coalesce(jsonb_path_query_array(${metaJson("logs")}, '$[*].msg')::text, '')`;

/** The indexed document: the query repeats this very expression so that the index serves it. */
export const SEARCH_DOCUMENT = `to_tsvector('simple'::regconfig, ${SEARCH_TEXT})`;

/** The run records (final attempts and retried ones), as the slot index takes them (src/engine/sql/runLog.ts). */
const RUN_RECORD = `event IN ('success', 'fail', 'retry')`;

export const SEARCH_INDEX = "agenda_logs_cw_search_idx";

/** Schema step 8 (src/engine/schema.ts): the GIN index of SEARCH_DOCUMENT over the run records. */
export const CREATE_SEARCH_INDEX = `
  CREATE INDEX IF NOT EXISTS "${SEARCH_INDEX}" ON "${LOGS_TABLE}" USING gin ((${SEARCH_DOCUMENT})) WHERE ${RUN_RECORD}`;

export interface RunSearchQuery {
  task?: string;
  outcomes?: readonly RunOutcome[];
  /** Recorded at or after. */
  from?: Date;
  /** Recorded before. */
  to?: Date;
  /** Words (websearch syntax: "a phrase", -excluded, or). */
  text?: string;
  /** The page after this record (newest first). */
  before?: { timestamp: Date; id: string };
  limit: number;
}

export interface RunSearchRow {
  id: string;
  job_name: string;
  event: string;
  timestamp: Date;
  duration: number | null;
  error: string | null;
  slot: string | null;
  outcome: string;
  started_at: string | null;
  attempt: string | null;
  trigger: string | null;
  requested_by: string | null;
  instance_id: string | null;
  agenda_name: string | null;
  detail: string | null;
}

/**
 * The matching run records, newest recorded first. Only the filters given are in the statement,
 * so each search is planned for what it asks: a task's recent runs read Agenda's (job_name,
 * timestamp) index, words the search index, a time range Agenda's timestamp index.
 */
export async function searchRunLog(db: Queryable, query: RunSearchQuery): Promise<RunSearchRow[]> {
  const params: unknown[] = [];
  const param = (value: unknown) => {
    params.push(value);
    return `$${params.length}`;
  };
  const where = [RUN_RECORD, metaHas("outcome")];
  if (query.task !== undefined) where.push(`job_name = ${param(query.task)}`);
  if (query.outcomes && query.outcomes.length > 0)
    where.push(`${metaText("outcome")} = ANY(${param(query.outcomes)}::text[])`);
  if (query.from) where.push(`timestamp >= ${param(query.from)}`);
  if (query.to) where.push(`timestamp < ${param(query.to)}`);
  if (query.text !== undefined)
    where.push(`${SEARCH_DOCUMENT} @@ websearch_to_tsquery('simple', ${param(query.text)})`);
  if (query.before)
    where.push(`(timestamp, id) < (${param(query.before.timestamp)}, ${param(query.before.id)}::uuid)`);
  const result = await db.query<RunSearchRow>(
    `SELECT id, job_name, event, timestamp, duration, error, agenda_name,
            ${metaText("scheduledAt")} AS slot, ${metaText("outcome")} AS outcome,
            ${metaText("startedAt")} AS started_at, ${metaText("attempt")} AS attempt,
            ${metaText("trigger")} AS trigger, ${metaText("requestedBy")} AS requested_by,
            ${metaText("instanceId")} AS instance_id, ${metaText("detail")} AS detail
       FROM "${LOGS_TABLE}"
      WHERE ${where.join(" AND ")}
      ORDER BY timestamp DESC, id DESC
      LIMIT ${param(query.limit)}`,
    params,
  );
  return result.rows;
}

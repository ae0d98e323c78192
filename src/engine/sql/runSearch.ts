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

/**
 * The words a run record is searched by: its error, its reason, its log lines' messages, as a
 * tsvector. A function (plpgsql, so never inlined) for two reasons:
 * - its declared COST: computing it reads the row's JSON and parses the text, tens of microseconds
 *   a row, where PostgreSQL's own to_tsvector is costed as a cheap call. Costed so, the planner
 *   walked Agenda's timestamp index newest first, computing it for every row, to find 50 matches:
 *   seconds for a rare word. Costed as it is, it takes the matches from the search index.
 * - the index and the query name one expression, so that they cannot drift apart.
 */
export const SEARCH_FUNCTION = "cronwarden_run_text";

export const CREATE_SEARCH_FUNCTION = `
  CREATE OR REPLACE FUNCTION ${SEARCH_FUNCTION}(error text, meta jsonb) RETURNS tsvector
  LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE COST 2000 AS $body$
  BEGIN
    RETURN to_tsvector('simple'::regconfig, coalesce(error, '') || ' ' || coalesce(${metaText("detail")}, '') || ' ' ||
      coalesce(jsonb_path_query_array(${metaJson("logs")}, '$[*].msg')::text, ''));
  END $body$`;

const SEARCH_DOCUMENT = `${SEARCH_FUNCTION}(error, meta)`;

/** The run records (final attempts and retried ones), as the slot index takes them (src/engine/sql/runLog.ts). */
const RUN_RECORD = `event IN ('success', 'fail', 'retry')`;

export const SEARCH_INDEX = "agenda_logs_cw_search_idx";

/**
 * Schema step 8 (src/engine/schema.ts): the GIN index of the search document, over every row (a
 * start row's document is empty). Not a partial index: the planner reads the statistics of an
 * index's expression (how many rows hold a word) only from an index without a predicate, and
 * without them it takes every word for a rare one.
 */
export const CREATE_SEARCH_INDEX = `
  CREATE INDEX IF NOT EXISTS "${SEARCH_INDEX}" ON "${LOGS_TABLE}" USING gin ((${SEARCH_DOCUMENT}))`;

/**
 * A search by words first takes up to this many matches, in any order, from the search index
 * under every filter: when that is all of them (a rare word, an id, a word of one task), the page
 * is the newest of those, in one statement.
 */
const ALL_MATCHES_CAP = 2_000;

/**
 * A word with more matches than that looks back from the newest end of its range in windows of
 * these sizes, until a page is full: the matches of a common word over the whole run log are too
 * many to sort (a word in one record of eight is over a million in ten million), those of one hour
 * or one day are not.
 */
const WINDOWS_MS = [
  3_600_000,
  86_400_000,
  7 * 86_400_000,
  30 * 86_400_000,
  90 * 86_400_000,
  365 * 86_400_000,
];

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

const COLUMNS = `id, job_name, event, timestamp, duration, error, agenda_name,
  ${metaText("scheduledAt")} AS slot, ${metaText("outcome")} AS outcome,
  ${metaText("startedAt")} AS started_at,
  -- attempt 1 of a started run is not stored (src/engine/sql/runStarts.ts COMPACT_META)
  coalesce(${metaText("attempt")}, CASE WHEN ${metaText("started")} = 'true' THEN '1' END) AS attempt,
  ${metaText("trigger")} AS trigger, ${metaText("requestedBy")} AS requested_by,
  ${metaText("instanceId")} AS instance_id, ${metaText("detail")} AS detail`;

/**
 * The matching run records, newest recorded first. Only the filters given are in the statement,
 * so each search is planned for what it asks: a task's recent runs read Agenda's (job_name,
 * timestamp) index, a time range Agenda's timestamp index, words the search index, window by
 * window (WINDOWS_MS).
 */
export async function searchRunLog(db: Queryable, query: RunSearchQuery, now: Date): Promise<RunSearchRow[]> {
  if (query.text === undefined) return (await db.query<RunSearchRow>(...statement(query, {}))).rows;
  const all = await db.query<RunSearchRow & { matched: number }>(
    ...statement(query, { cap: ALL_MATCHES_CAP }),
  );
  if ((all.rows[0]?.matched ?? 0) <= ALL_MATCHES_CAP) return all.rows.map(({ matched: _, ...row }) => row);
  const found: RunSearchRow[] = [];
  // the newest end: the range's, the page's, or now (a record stamped by a clock ahead is in the first window)
  const top = Math.min(
    query.to?.getTime() ?? Infinity,
    query.before?.timestamp.getTime() ?? Infinity,
    now.getTime(),
  );
  const bottom = query.from?.getTime() ?? -Infinity;
  let upper: number | undefined;
  for (const size of [...WINDOWS_MS, Infinity]) {
    const lower = Math.max(bottom, top - size);
    const window = {
      from: lower === -Infinity ? undefined : new Date(lower),
      to: upper === undefined ? undefined : new Date(upper),
    };
    const rows = (
      await db.query<RunSearchRow>(...statement({ ...query, limit: query.limit - found.length }, { window }))
    ).rows;
    found.push(...rows);
    if (found.length >= query.limit || lower <= bottom) break;
    upper = lower;
  }
  return found;
}

/**
 * One statement: the query's filters; searching by words, within a `window` or up to `cap + 1`
 * matches (counted in `matched`). Words collect their matches first, MATERIALIZED, then read the
 * page by id: the planner cannot trade the search index for a walk of the timestamp index that
 * computes the document row by row.
 */
function statement(
  query: RunSearchQuery,
  how: { window?: { from: Date | undefined; to: Date | undefined }; cap?: number },
): [string, unknown[]] {
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
  if (how.window?.from) where.push(`timestamp >= ${param(how.window.from)}`);
  if (how.window?.to) where.push(`timestamp < ${param(how.window.to)}`);
  if (query.text !== undefined)
    where.push(`${SEARCH_DOCUMENT} @@ websearch_to_tsquery('simple', ${param(query.text)})`);
  if (query.before)
    where.push(`(timestamp, id) < (${param(query.before.timestamp)}, ${param(query.before.id)}::uuid)`);
  const order = "ORDER BY timestamp DESC, id DESC";
  const limit = param(query.limit);
  if (!how.window && how.cap === undefined)
    return [
      `SELECT ${COLUMNS} FROM "${LOGS_TABLE}" WHERE ${where.join(" AND ")} ${order} LIMIT ${limit}`,
      params,
    ];
  const cap = how.cap === undefined ? "" : `LIMIT ${param(how.cap + 1)}`;
  return [
    `WITH hits AS MATERIALIZED (SELECT id, timestamp FROM "${LOGS_TABLE}" WHERE ${where.join(" AND ")} ${cap})
     SELECT ${COLUMNS}${how.cap === undefined ? "" : ", (SELECT count(*) FROM hits)::int AS matched"} FROM "${LOGS_TABLE}"
      WHERE id IN (SELECT id FROM hits ${order} LIMIT ${limit})
      ${order}`,
    params,
  ];
}

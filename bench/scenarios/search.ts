/**
 * Scenario 7, search: the run search (src/engine/sql/runSearch.ts) over a run log of
 * `sizes.searchRows` records (10 million in full mode), loaded with generate_series into one
 * database migrated as the service migrates it. The search index is dropped for the load and built
 * again after it, as `cronwarden migrate` builds it on an existing run log (its build time is a
 * figure too). Then typical searches, each kind 20 times with other words, tasks or ranges,
 * through the same function the admin API calls; latency per search, p50 / p95 / max per kind and
 * over all of them.
 *
 * The rows: 1,000 tasks over 90 days; 90% succeeded, 8% failed, 2% retried attempts; a failed
 * row's error is one of 40 messages (one of them holds ECONNRESET: 0.25% of all rows); every row
 * has two log lines, one naming one of 8 sources ("warehouse" in 1 of 8 rows) and one an order id
 * among 100,000 (each in 100 rows).
 */
import pg from "pg";
import { migrateSchema } from "../../src/engine/schema.js";
import {
  CREATE_SEARCH_INDEX,
  type RunSearchQuery,
  SEARCH_INDEX,
  searchRunLog,
} from "../../src/engine/sql.js";
import type { BenchContext } from "../lib/common.js";

export interface SearchKindFigures {
  kind: string;
  searches: number;
  p50: number;
  p95: number;
  max: number;
  /** Rows the searches answered, on average (at most the page size). */
  meanRows: number;
}

export interface SearchFigures {
  rows: number;
  loadS: number;
  indexBuildS: number;
  tableBytes: string;
  indexBytes: string;
  kinds: SearchKindFigures[];
  overall: { searches: number; p50: number; p95: number; max: number };
}

const REPEATS = 20;
const PAGE = 50;
const DAYS = 90;
const LOAD_BATCH = 1_000_000;
const ERRORS = Array.from({ length: 40 }, (_, index) =>
  index === 7
    ? "read ECONNRESET while talking to the payments gateway"
    : `step ${index} failed: upstream answered 50${index % 4} after ${index * 100} ms`,
);
const SOURCES = ["warehouse", "ledger", "crm", "billing", "inventory", "shipping", "catalog", "search"];

export async function runSearch(context: BenchContext): Promise<SearchFigures> {
  const rows = context.sizes.searchRows;
  const pool = new pg.Pool({ connectionString: await context.pg.createDatabase("search"), max: 2 });
  pool.on("error", () => {});
  try {
    await migrateSchema(pool);
    await pool.query(`DROP INDEX IF EXISTS "${SEARCH_INDEX}"`);
    const loadStarted = performance.now();
    for (let from = 0; from < rows; from += LOAD_BATCH) {
      await load(pool, from, Math.min(rows, from + LOAD_BATCH) - 1);
      context.progress(
        `search: ${Math.min(rows, from + LOAD_BATCH).toLocaleString("en")} of ${rows.toLocaleString("en")} rows`,
      );
    }
    const loadS = (performance.now() - loadStarted) / 1000;
    const indexStarted = performance.now();
    const client = await pool.connect();
    try {
      await client.query("SET maintenance_work_mem = '256MB'");
      await client.query(CREATE_SEARCH_INDEX);
    } finally {
      client.release();
    }
    const indexBuildS = (performance.now() - indexStarted) / 1000;
    await pool.query("VACUUM ANALYZE agenda_logs");
    context.progress(`search: loaded in ${loadS.toFixed(0)} s, index built in ${indexBuildS.toFixed(0)} s`);
    const sizes = await pool.query<{ table: string; index: string }>(
      `SELECT pg_size_pretty(pg_total_relation_size('agenda_logs')) AS table,
              pg_size_pretty(pg_relation_size('"${SEARCH_INDEX}"')) AS index`,
    );
    const newest = (await pool.query<{ t: Date }>("SELECT max(timestamp) AS t FROM agenda_logs")).rows[0]
      ?.t as Date;
    const kinds: SearchKindFigures[] = [];
    const all: number[] = [];
    for (const [kind, make] of searches(newest)) {
      const times: number[] = [];
      let answered = 0;
      for (let index = 0; index < REPEATS; index++) {
        const started = performance.now();
        const found = await searchRunLog(pool, { ...make(index), limit: PAGE }, new Date());
        times.push(performance.now() - started);
        answered += found.length;
      }
      all.push(...times);
      kinds.push({ kind, searches: REPEATS, ...percentiles(times), meanRows: answered / REPEATS });
      const last = kinds.at(-1) as SearchKindFigures;
      context.progress(`search: ${kind}: p50 ${last.p50.toFixed(1)} ms, p95 ${last.p95.toFixed(1)} ms`);
    }
    return {
      rows,
      loadS,
      indexBuildS,
      tableBytes: sizes.rows[0]?.table ?? "?",
      indexBytes: sizes.rows[0]?.index ?? "?",
      kinds,
      overall: { searches: all.length, ...percentiles(all) },
    };
  } finally {
    await pool.end().catch(() => {});
    await context.pg.dropDatabase("search").catch(() => {});
  }
}

/** Rows `from`..`to` of the run log, newest first by number (row 0 is the newest). */
async function load(pool: pg.Pool, from: number, to: number): Promise<void> {
  await pool.query(
    `INSERT INTO agenda_logs (timestamp, level, event, job_name, message, duration, error, agenda_name, meta)
     SELECT ts, 'info', ev, 'task-' || lpad((g % 1000)::text, 4, '0'), 'run', 100 + g % 5000,
            CASE WHEN ev = 'success' THEN NULL ELSE ($3::text[])[1 + (g * 7919) % 40] END, 'bench-1',
            jsonb_build_object(
              'scheduledAt', to_char(ts AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
              'outcome', CASE WHEN ev = 'success' THEN 'succeeded' ELSE 'failed' END,
              'attempt', 1, 'instanceId', 'bench-1',
              'logs', jsonb_build_array(
                jsonb_build_object('at', ts, 'level', 'info', 'msg',
                  'fetched ' || (g % 500) || ' rows from ' || ($4::text[])[1 + g % 8]),
                jsonb_build_object('at', ts, 'level', 'info', 'msg', 'processing order ord' || (g % 100000))))
       FROM generate_series($1::bigint, $2::bigint) g,
            LATERAL (SELECT now() - g * ($5::double precision * interval '1 millisecond') AS ts,
                            CASE WHEN g % 100 < 90 THEN 'success' WHEN g % 100 < 98 THEN 'fail' ELSE 'retry' END AS ev) r`,
    [from, to, ERRORS, SOURCES, (DAYS * 86_400_000) / 10_000_000],
  );
}

type Search = (index: number) => Omit<RunSearchQuery, "limit">;

/** The typical searches: words alone, words with a filter, filters alone. */
function searches(newest: Date): Array<[string, Search]> {
  const day = 86_400_000;
  const ago = (days: number) => new Date(newest.getTime() - days * day);
  const task = (index: number) => `task-${String((index * 37) % 1000).padStart(4, "0")}`;
  return [
    ["a rare error word (0.25% of rows), newest 50", () => ({ text: "ECONNRESET" })],
    ["a rare error word, last 7 days", (index) => ({ text: "ECONNRESET", from: ago(7 + index) })],
    [
      "a rare error word, failed, a 30-day range",
      (index) => ({ text: "ECONNRESET", outcomes: ["failed"], from: ago(30 + index), to: ago(index) }),
    ],
    ["a rare error word, one task", (index) => ({ text: "ECONNRESET", task: task(index) })],
    ["a log-line id (100 rows)", (index) => ({ text: `ord${(index * 4243) % 100000}` })],
    ["a common log word (1 row in 8), newest 50", () => ({ text: "warehouse" })],
    [
      "a common log word, one task, last 30 days",
      (index) => ({ text: "warehouse", task: task(index), from: ago(30) }),
    ],
    ["a word found nowhere", (index) => ({ text: `zzznomatch${index}` })],
    ["one task's failed runs (no words)", (index) => ({ task: task(index), outcomes: ["failed"] })],
    ["failed runs, last 24 h (no words)", (index) => ({ outcomes: ["failed"], from: ago(1 + index / 10) })],
  ];
}

function percentiles(values: number[]): { p50: number; p95: number; max: number } {
  const sorted = [...values].sort((a, b) => a - b);
  const at = (q: number) =>
    sorted[Math.min(sorted.length - 1, Math.ceil(q * sorted.length) - 1)] ?? Number.NaN;
  return { p50: at(0.5), p95: at(0.95), max: sorted.at(-1) ?? Number.NaN };
}

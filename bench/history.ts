/**
 * What run history costs: one scheduler with `--tasks` tasks due every `--every` seconds runs for
 * `--seconds`, then the run log's size on disk (pg_total_relation_size of agenda_logs and of every
 * partition of it: heap, TOAST and indexes) is divided by the runs it records. Also the size of
 * each index. An embedded PostgreSQL at default settings, autovacuum as it comes (no VACUUM by
 * hand): the figure is the growth between a third of the way and the end, per run recorded in
 * between, so the first pages' fill does not count.
 *
 *   node --import tsx bench/history.ts [--tasks 200] [--every 2] [--seconds 60]
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import pg from "pg";
import { createLogger } from "../src/core/logger.js";
import { createScheduler } from "../src/index.js";
import type { ConfigDocument, ConfigListener, ConfigSource } from "../src/sources/configSource.js";
import { startBenchPostgres } from "./lib/postgres.js";

const args = process.argv.slice(2);
const option = (name: string, fallback: number) => {
  const index = args.indexOf(`--${name}`);
  return index >= 0 ? Number(args[index + 1]) : fallback;
};
const TASKS = option("tasks", 200);
const EVERY_S = option("every", 2);
const SECONDS = option("seconds", 60);

/** The tasks, all enabled, on one 6-field cron. */
class FixedSource implements ConfigSource {
  readonly description = "bench tasks";
  async load(): Promise<ConfigDocument> {
    return {
      revision: "1",
      content: {
        tasks: Array.from({ length: TASKS }, (_, index) => ({
          name: `history-${String(index).padStart(5, "0")}`,
          enabled: true,
          cron: `*/${EVERY_S} * * * * *`,
        })),
      },
    };
  }
  subscribe(_listener: ConfigListener): () => Promise<void> {
    return async () => {};
  }
}

/** The run log's size on disk (every partition, TOAST and index) and the runs it records. */
async function measure(): Promise<{ bytes: number; runs: number }> {
  const result = await pool.query<{ bytes: string; runs: number }>(
    `SELECT (SELECT sum(pg_total_relation_size(relid)) FROM (SELECT 'agenda_logs'::regclass AS relid
              UNION SELECT relid FROM pg_partition_tree('agenda_logs')) t)::text AS bytes,
            (SELECT count(*)::int FROM agenda_logs WHERE event IN ('success', 'fail')) AS runs`,
  );
  return { bytes: Number(result.rows[0]?.bytes ?? 0), runs: result.rows[0]?.runs ?? 0 };
}

const dir = await mkdtemp(path.join(tmpdir(), "cronwarden-history-bench-"));
const postgres = await startBenchPostgres(dir);
const pool = new pg.Pool({ connectionString: await postgres.createDatabase("history"), max: 10 });
try {
  const scheduler = createScheduler({
    pool,
    config: new FixedSource(),
    logger: createLogger({ level: "warn", destination: process.stderr }),
    instanceId: "history-bench",
    minIntervalMs: EVERY_S * 1000,
  });
  for (let index = 0; index < TASKS; index++)
    scheduler.register({ name: `history-${String(index).padStart(5, "0")}`, handler: async () => {} });
  await scheduler.start();
  await new Promise((resolve) => setTimeout(resolve, (SECONDS * 1000) / 3));
  const warm = await measure();
  await new Promise((resolve) => setTimeout(resolve, (SECONDS * 2000) / 3));
  await scheduler.stop({ drainTimeoutMs: 5000 });
  const end = await measure();
  const tree = `(SELECT 'agenda_logs'::regclass AS relid UNION SELECT relid FROM pg_partition_tree('agenda_logs'))`;
  const runs = await pool.query<{ runs: number; rows: number }>(
    `SELECT count(*) FILTER (WHERE event IN ('success', 'fail'))::int AS runs, count(*)::int AS rows FROM agenda_logs`,
  );
  const sizes = await pool.query<{ name: string; bytes: string; kind: string }>(
    `SELECT c.relname AS name, pg_relation_size(c.oid)::text AS bytes, c.relkind::text AS kind
       FROM pg_class c
      WHERE c.oid IN (SELECT relid FROM ${tree} t)
         OR c.oid IN (SELECT indexrelid FROM pg_index WHERE indrelid IN (SELECT relid FROM ${tree} t))
         OR c.oid IN (SELECT reltoastrelid FROM pg_class WHERE oid IN (SELECT relid FROM ${tree} t))`,
  );
  const total = await pool.query<{ bytes: string }>(
    `SELECT sum(pg_total_relation_size(relid))::text AS bytes FROM ${tree} t`,
  );
  const { runs: count, rows } = runs.rows[0] ?? { runs: 0, rows: 0 };
  const bytes = Number(total.rows[0]?.bytes ?? 0);
  console.log(`${TASKS} tasks every ${EVERY_S} s for ${SECONDS} s: ${count} runs, ${rows} rows`);
  console.log(`run log total ${(bytes / 1024).toFixed(0)} kB: ${(bytes / count).toFixed(0)} bytes per run`);
  const growth = (end.bytes - warm.bytes) / (end.runs - warm.runs);
  console.log(
    `growth from ${warm.runs} to ${end.runs} runs: ${((end.bytes - warm.bytes) / 1024).toFixed(0)} kB, ${growth.toFixed(0)} bytes per run`,
  );
  for (const row of sizes.rows.filter((size) => Number(size.bytes) > 0))
    console.log(`  ${row.name} (${row.kind}): ${(Number(row.bytes) / count).toFixed(0)} bytes per run`);
  const columns = await pool.query<{ row: string; meta: string }>(
    `SELECT avg(pg_column_size(l.*))::int::text AS row, avg(pg_column_size(l.meta))::int::text AS meta
       FROM agenda_logs l WHERE event IN ('success', 'fail')`,
  );
  console.log(`  a record: ${columns.rows[0]?.row} bytes, its meta ${columns.rows[0]?.meta} bytes (average)`);
  console.log(
    JSON.stringify({
      bench: "history",
      tasks: TASKS,
      everyS: EVERY_S,
      seconds: SECONDS,
      runs: count,
      rows,
      bytesPerRun: Math.round(bytes / count),
      growthBytesPerRun: Math.round(growth),
    }),
  );
} finally {
  await pool.end();
  await postgres.stop();
  await rm(dir, { recursive: true, force: true });
}

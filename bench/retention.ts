/**
 * Retention by partition (src/engine/sql/runLogPartitions.ts): one day's partition of the run log
 * filled with `--rows` records (14.4 million by default: 10,000 tasks every minute for a day),
 * loaded with generate_series into a database migrated as the service migrates it (every index
 * of the run log in place during the load, the partition analyzed as autovacuum would), then
 * dropped by the retention (pruneRunLog, as the hourly prune calls it) while runs are recorded
 * into today's partition (writeRunLogRows, batches of 100 every 100 ms, as the recorder writes a
 * herd). Figures: the prune's time, and the slowest record write during it against the slowest
 * before it. An embedded PostgreSQL at default settings.
 *
 *   node --import tsx bench/retention.ts [--rows 14400000]
 */
import { randomUUID } from "node:crypto";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import pg from "pg";
import { migrateSchema } from "../src/engine/schema.js";
import {
  coverRunLog,
  LEGACY_PARTITION,
  LOGS_TABLE,
  pruneRunLog,
  type RunLogInsert,
  writeRunLogRows,
} from "../src/engine/sql.js";
import { startBenchPostgres } from "./lib/postgres.js";

const args = process.argv.slice(2);
const index = args.indexOf("--rows");
const ROWS = index >= 0 ? Number(args[index + 1]) : 14_400_000;
const TASKS = 10_000;
const LOAD_BATCH = 1_000_000;
const DAY = 86_400_000;

const dir = await mkdtemp(path.join(tmpdir(), "cronwarden-retention-"));
const postgres = await startBenchPostgres(dir);
const pool = new pg.Pool({ connectionString: await postgres.createDatabase("retention"), max: 6 });
try {
  await migrateSchema(pool);
  // a fresh database's legacy partition holds every time up to tomorrow: gone, so a past day has its own
  await pool.query(`ALTER TABLE "${LOGS_TABLE}" DETACH PARTITION "${LEGACY_PARTITION}"`);
  await pool.query(`DROP TABLE "${LEGACY_PARTITION}"`);
  const now = Date.now();
  const day = Math.floor((now - 31 * DAY) / DAY) * DAY;
  await coverRunLog(pool, 24, new Date(day), new Date(day + 1));
  await coverRunLog(pool, 24, new Date(now), new Date(now + DAY));
  const loadStarted = performance.now();
  for (let first = 0; first < ROWS; first += LOAD_BATCH) {
    const last = Math.min(ROWS, first + LOAD_BATCH) - 1;
    // row n: task n % TASKS, its minute n / TASKS of the day (spread over the day when fewer rows)
    await pool.query(
      `INSERT INTO "${LOGS_TABLE}" (timestamp, level, event, job_id, job_name, message, duration, agenda_name, meta)
       SELECT slot + interval '350 milliseconds', 'info', 'success', 'job-' || (n % ${TASKS}), 'task-' || (n % ${TASKS}),
              'job succeeded', 340, 'host:1:abcdef',
              jsonb_build_object('scheduledAt', to_char(slot AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
                'startedAt', to_char((slot + interval '10 milliseconds') AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
                'finishedAt', to_char((slot + interval '350 milliseconds') AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
                'outcome', 'succeeded', 'started', true)
         FROM generate_series($1::bigint, $2::bigint) n,
              LATERAL (SELECT $3::timestamptz + ((n * ${DAY}::bigint / $4::bigint) / 60000) * interval '1 minute' AS slot) s`,
      [first, last, new Date(day), ROWS],
    );
    process.stderr.write(`loaded ${last + 1} rows\n`);
  }
  const loadS = (performance.now() - loadStarted) / 1000;
  const partition = `${LOGS_TABLE}_p${new Date(day).toISOString().slice(0, 10).replaceAll("-", "")}`;
  await pool.query(`ANALYZE "${partition}"`);
  const size = await pool.query<{ bytes: string }>(
    "SELECT pg_size_pretty(sum(pg_total_relation_size(relid))) AS bytes FROM pg_partition_tree($1) ",
    [partition],
  );

  // runs recorded all along: batches of 100 records every 100 ms into today's partition
  const latencies: { at: number; ms: number }[] = [];
  let recording = true;
  const recorder = (async () => {
    while (recording) {
      const rows: RunLogInsert[] = Array.from({ length: 100 }, (_, n) => ({
        id: randomUUID(),
        timestamp: new Date(),
        level: "info",
        event: "success",
        jobId: `job-${n}`,
        jobName: `task-${n}`,
        message: "job succeeded",
        agendaName: "host:1:abcdef",
        meta: { scheduledAt: new Date().toISOString(), outcome: "succeeded", started: true },
      }));
      const started = performance.now();
      await writeRunLogRows(pool, rows);
      latencies.push({ at: started, ms: performance.now() - started });
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  })();
  await new Promise((resolve) => setTimeout(resolve, 3_000));
  const dropStarted = performance.now();
  const dropped = await pruneRunLog(pool, { before: new Date(now - 30 * DAY), keepPerTask: 0 });
  const dropEnded = performance.now();
  await new Promise((resolve) => setTimeout(resolve, 2_000));
  recording = false;
  await recorder;
  const gone = await pool.query("SELECT to_regclass($1) AS table", [partition]);
  const before = latencies.filter((write) => write.at + write.ms < dropStarted);
  const during = latencies.filter((write) => write.at < dropEnded && write.at + write.ms > dropStarted);
  const max = (writes: typeof latencies) => Math.max(0, ...writes.map((write) => write.ms));
  const figures = {
    bench: "retention",
    rows: ROWS,
    partitionSize: size.rows[0]?.bytes,
    loadS: Number(loadS.toFixed(1)),
    dropMs: Math.round(dropEnded - dropStarted),
    rowsDropped: dropped,
    partitionGone: gone.rows[0]?.table === null,
    writesDuring: during.length,
    maxWriteMsBefore: Number(max(before).toFixed(1)),
    maxWriteMsDuring: Number(max(during).toFixed(1)),
    postgres: postgres.version,
  };
  console.log(
    `a day's partition of ${ROWS} records (${figures.partitionSize}, loaded in ${figures.loadS} s) dropped by the retention in ${figures.dropMs} ms; record writes during it: ${figures.writesDuring}, slowest ${figures.maxWriteMsDuring} ms (before: ${figures.maxWriteMsBefore} ms)`,
  );
  console.log(JSON.stringify(figures));
} finally {
  await pool.end();
  await postgres.stop();
  await rm(dir, { recursive: true, force: true });
}

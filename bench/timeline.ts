/**
 * The timeline at scale: 1,000 tasks with a one-minute schedule and 24 h of run records each
 * (1.44 million `success` rows, plus a start row per run), in an embedded PostgreSQL. Measures
 * GET /slots over real HTTP (all pages, at the dashboard's resolution for a 1,000 px plot, and
 * one task unbucketed), and the dashboard's load and canvas draw of all 1,000 rows in headless
 * Chromium (Debian's, as the e2e tests use).
 *
 *   node --import tsx bench/timeline.ts [--tasks 1000] [--hours 24]
 */
import { EventEmitter } from "node:events";
import { existsSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import pg from "pg";
import { chromium } from "playwright-core";
import { createAdminServer } from "../src/admin/index.js";
import type { AdminScheduler } from "../src/admin/schedulerApi.js";
import { createLogger } from "../src/core/logger.js";
import { migrateSchema } from "../src/engine/schema.js";
import type { TaskStatus } from "../src/status/statusModel.js";
import { readTimeline, type TimelineQuery } from "../src/status/timeline.js";
import { startBenchPostgres } from "./lib/postgres.js";

const args = process.argv.slice(2);
const option = (name: string, fallback: number) => {
  const index = args.indexOf(`--${name}`);
  return index >= 0 ? Number(args[index + 1]) : fallback;
};
const TASKS = option("tasks", 1000);
const HOURS = option("hours", 24);
const CHROMIUM = process.env.CHROMIUM_PATH ?? "/usr/bin/chromium";

const dir = await mkdtemp(path.join(tmpdir(), "cronwarden-timeline-bench-"));
const postgres = await startBenchPostgres(dir);
const pool = new pg.Pool({ connectionString: await postgres.createDatabase("timeline"), max: 4 });
try {
  await migrateSchema(pool);
  const now = new Date();
  const minute = 60_000;
  const end = Math.floor(now.getTime() / minute) * minute;
  const start = end - HOURS * 3_600_000;
  const seeded = performance.now();
  await pool.query(
    `INSERT INTO agenda_jobs (name, type, repeat_interval, repeat_timezone, next_run_at, created_at, last_run_at, last_finished_at)
     SELECT 'task-' || lpad(g::text, 4, '0'), 'single', '* * * * *', 'UTC', to_timestamp($1 / 1000.0) + interval '1 minute',
            to_timestamp($2 / 1000.0), to_timestamp($1 / 1000.0), to_timestamp($1 / 1000.0) + interval '1 second'
       FROM generate_series(1, $3) g`,
    [end, start, TASKS],
  );
  // one start and one success row per slot; every 97th slot failed, every 1,009th missed
  for (let task = 1; task <= TASKS; task += 50) {
    await pool.query(
      `INSERT INTO agenda_logs (timestamp, level, event, job_name, message, duration, error, meta)
       SELECT to_timestamp((s + 1000 + d) / 1000.0), 'info', e.event, 'task-' || lpad(t::text, 4, '0'), 'x',
              CASE WHEN e.event = 'start' THEN NULL ELSE d END,
              CASE WHEN e.event = 'fail' THEN 'upstream 503' END,
              jsonb_build_object('scheduledAt', to_char(to_timestamp(s / 1000.0) AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
                                 'instanceId', 'bench') ||
              CASE WHEN e.event = 'start' THEN '{}'::jsonb ELSE jsonb_build_object(
                'outcome', CASE WHEN e.event = 'fail' THEN 'failed' ELSE 'succeeded' END, 'attempt', 1,
                'startedAt', to_char(to_timestamp((s + 1000) / 1000.0) AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
                'finishedAt', to_char(to_timestamp((s + 1000 + d) / 1000.0) AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')) END
         FROM generate_series($1::bigint, $2::bigint - 1, 60000) s,
              generate_series($3::int, least($3 + 49, $4)) t,
              LATERAL (SELECT (200 + (s / 60000 + t) % 900)::int AS d) dd,
              LATERAL (SELECT unnest(ARRAY['start', CASE WHEN (s / 60000 + t) % 97 = 0 THEN 'fail' ELSE 'success' END]) AS event) e
        WHERE (s / 60000 + t) % 1009 <> 0`,
      [start, end, task, TASKS],
    );
  }
  await pool.query("VACUUM ANALYZE agenda_logs");
  const { rows: size } = await pool.query<{ rows: string; bytes: string }>(
    "SELECT count(*) AS rows, pg_size_pretty(pg_total_relation_size('agenda_logs')) AS bytes FROM agenda_logs",
  );
  console.log(
    `seeded ${TASKS} tasks x ${HOURS} h of minute slots: ${size[0]?.rows} rows (${size[0]?.bytes}) in ${Math.round((performance.now() - seeded) / 1000)} s`,
  );

  const statuses: TaskStatus[] = Array.from({ length: TASKS }, (_, index) => ({
    name: `task-${String(index + 1).padStart(4, "0")}`,
    registered: true,
    description: null,
    configured: { enabled: true, cron: "* * * * *", timezone: "UTC" },
    job: {
      enabled: true,
      cron: "* * * * *",
      timezone: "UTC",
      nextRunAt: new Date(end + minute),
      lastRunAt: new Date(end),
      lastFinishedAt: new Date(end + 1000),
    },
    state: "enabled",
    running: false,
    runningOn: null,
    lastOutcome: "succeeded",
    lastError: null,
    consecutiveFailures: 0,
    consecutiveFailedAttempts: 0,
    recentOutcomes: [],
    dependencies: { upstreams: [], downstreams: [], when: null, waitAtMost: null },
  }));
  // the admin server over the seeded database: the timeline as the scheduler reads it, a fixed task list
  const scheduler = Object.assign(new EventEmitter(), {
    status: async () => statuses,
    taskStatus: async (name: string) => statuses.find((task) => task.name === name),
    timeline: (query: TimelineQuery) =>
      readTimeline({ pool, namespace: "default", missedSlotGraceMs: 60_000 }, query),
  }) as unknown as AdminScheduler;
  const server = createAdminServer({ scheduler, port: 0, logger: createLogger({ level: "warn" }) });
  const { url } = await server.listen();
  try {
    const from = new Date(end - HOURS * 3_600_000 + minute / 2).toISOString();
    const to = new Date(end + HOURS * 180_000).toISOString();
    // as the dashboard asks for a 1,000 px plot: one bucket per 3 px
    const bucketMs = Math.floor(((Date.parse(to) - Date.parse(from)) / 1000) * 3);
    const fetchAll = async (query: string) => {
      const started = performance.now();
      let cursor: string | null = null;
      let pages = 0;
      let marks = 0;
      let bytes = 0;
      let missed = 0;
      do {
        const response = await fetch(`${url}/slots?${query}${cursor ? `&cursor=${cursor}` : ""}`);
        const text = await response.text();
        if (!response.ok) throw new Error(`${response.status} ${text}`);
        const page = JSON.parse(text) as {
          marks: Array<{ outcome: string; outcomes?: Record<string, number> }>;
          nextCursor: string | null;
        };
        bytes += text.length;
        marks += page.marks.length;
        missed += page.marks.reduce(
          (sum, mark) => sum + (mark.outcomes?.missed ?? (mark.outcome === "missed" ? 1 : 0)),
          0,
        );
        cursor = page.nextCursor;
        pages += 1;
      } while (cursor);
      return {
        ms: Math.round(performance.now() - started),
        pages,
        marks,
        missed,
        mb: (bytes / 1e6).toFixed(1),
      };
    };
    for (let round = 1; round <= 2; round++) {
      const all = await fetchAll(`from=${from}&to=${to}&bucketMs=${bucketMs}&limit=50000`);
      console.log(
        `GET /slots, ${TASKS} tasks, ${HOURS} h, bucketMs=${bucketMs} (1,000 px plot), round ${round}: ${all.ms} ms, ${all.pages} pages, ${all.marks} marks (${all.missed} missed slots), ${all.mb} MB`,
      );
    }
    const one = await fetchAll(`from=${from}&to=${to}&tasks=task-0001&limit=50000`);
    console.log(`GET /slots, 1 task, ${HOURS} h, every mark: ${one.ms} ms, ${one.marks} marks, ${one.mb} MB`);
    const plan = await pool.query(
      `EXPLAIN (ANALYZE, BUFFERS) SELECT id FROM agenda_logs WHERE job_name = 'task-0500' AND event IN ('success', 'fail', 'retry')
         AND (meta->>'scheduledAt') >= $1 AND (meta->>'scheduledAt') < $2 AND meta ? 'outcome'
       ORDER BY (meta->>'scheduledAt'), id LIMIT 50001`,
      [from, to],
    );
    console.log(plan.rows.map((row) => `  ${row["QUERY PLAN"]}`).join("\n"));

    if (!existsSync(CHROMIUM)) {
      console.log(`no Chromium at ${CHROMIUM}: render not measured`);
    } else {
      const browser = await chromium.launch({
        executablePath: CHROMIUM,
        args: ["--no-sandbox", "--disable-gpu"],
      });
      try {
        const context = await browser.newContext({ viewport: { width: 1234, height: 900 } });
        const tab = await context.newPage();
        for (const [round, rows] of [
          [1, 100],
          [2, 100],
          [1, TASKS],
          [2, TASKS],
        ] as const) {
          await tab.goto("about:blank");
          await tab.goto(`${url}/dashboard/#/timeline?range=24h&rows=${rows}`);
          const timeline = tab.locator("#timeline[data-render-ms]");
          await timeline.waitFor({ timeout: 120_000 });
          const plotWidth = await tab.locator("#tl-canvas").evaluate((canvas) => canvas.clientWidth);
          console.log(
            `dashboard 24 h, ${rows} rows, ${plotWidth} px plot, round ${round}: load ${await timeline.getAttribute("data-load-ms")} ms (all /slots pages), draw ${await timeline.getAttribute("data-render-ms")} ms; ${await tab.locator("#tl-stats").textContent()}`,
          );
        }
        const row = Math.floor(TASKS / 2);
        const started = Date.now();
        const plotWidth = await tab.locator("#tl-canvas").evaluate((canvas) => canvas.clientWidth);
        // the 'now' line is 1/20 of the range from the right edge; the last slots are just before it
        await tab
          .locator("#tl-canvas")
          .hover({ position: { x: Math.round(plotWidth * 0.94), y: 26 + 22 * row + 11 } });
        await tab.locator("#tl-tip:not([hidden])").waitFor();
        console.log(`hover on row ${row} to tooltip: ${Date.now() - started} ms (including playwright)`);
      } finally {
        await browser.close();
      }
    }
  } finally {
    await server.close();
  }
} finally {
  await pool.end();
  await postgres.stop();
  await rm(dir, { recursive: true, force: true });
}

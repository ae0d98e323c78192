/**
 * Backfill, cronwarden only (raw Agenda has none): three processes, one task on a 1 s cron whose
 * handler takes 100 ms, a 1 s poll (a 1 s cron needs one) and the default 15 s lock lifetime. After a baseline of live slots,
 * a backfill of `backfillSlots` past slots of the same task at concurrency 10 is created (as
 * `cronwarden backfill` does: src/operations/backfills.ts, then the wake every instance gets); when
 * half of it has succeeded, one process gets SIGKILL. Figures: the backfill's duration and
 * throughput, each slot's succeeded records (exactly one each is the goal), slots started more
 * than once (the killed process's runs, re-run by the others), whether every progress read added
 * up to the total (at most 10 at once is asserted by test/integration/slotActions.test.ts), and the live slots' start lateness
 * before the backfill and during it, with the live slots no handler started for.
 */

import pg from "pg";
import { BACKFILL_WAKE } from "../../src/engine/backfillRunner.js";
import { LOGS_TABLE } from "../../src/engine/sql/tables.js";
import { Backfills } from "../../src/operations/backfills.js";
import type { Worker } from "../lib/children.js";
import { type BenchContext, percentile, prepareContender, round, sleep } from "../lib/common.js";
import type { WorkerMessage } from "../lib/protocol.js";

const PROCESSES = 3;
const CONCURRENCY = 10;
const TASK_MS = 100;
const BASELINE_MS = 20_000;

export interface BackfillFigures {
  slots: number;
  concurrency: number;
  processes: number;
  durationS: number;
  slotsPerS: number;
  /** Creation -> the first backfill handler start (s): the wake reached the instances. */
  firstStartS: number | null;
  /** Creation -> half the slots succeeded, when the SIGKILL is sent (s). */
  halfS: number | null;
  /** Slots with exactly one succeeded record (the goal: all of them). */
  exactlyOnce: number;
  /** Slots with no succeeded record, and with more than one. */
  missing: number;
  duplicated: number;
  /** Slots whose handler started more than once (the killed process's, taken over). */
  restarted: number;
  /** Every progress read: the per-state counts added up to the total. */
  progressConsistent: boolean;
  progressReads: number;
  liveBefore: LiveLateness;
  liveDuring: LiveLateness;
}

interface LiveLateness {
  slots: number;
  /** Live slots of the window no handler started for. */
  notStarted: number;
  p50Ms: number | null;
  p99Ms: number | null;
  maxMs: number | null;
}

type Start = Extract<WorkerMessage, { type: "start" }>;

export async function runBackfill(context: BenchContext): Promise<BackfillFigures> {
  const count = context.sizes.backfillSlots;
  const database = "bench_backfill";
  const tasks = { prefix: "bf", count: 1, cron: "* * * * * *" };
  const launch = await prepareContender(context, "cronwarden", database, tasks);
  const pool = new pg.Pool({ connectionString: context.pg.urlOf(database), max: 2 });
  const workers: Worker[] = [];
  try {
    const spec = { processEveryMs: 1_000, minIntervalMs: 1_000, taskMs: TASK_MS };
    workers.push(...Array.from({ length: PROCESSES }, (_, index) => launch(`backfill-${index}`, spec)));
    await Promise.all(workers.map((worker) => worker.ready(60_000)));
    const baselineFrom = Date.now();
    await sleep(BASELINE_MS);
    // a past range of the task's 1 s slots, well before anything ran
    const from = Math.floor((Date.now() - 6 * 3_600_000) / 1_000) * 1_000;
    const createdAt = Date.now();
    const created = await new Backfills(pool).create({
      task: "bf00000",
      from: new Date(from),
      to: new Date(from + (count - 1) * 1_000),
      concurrency: CONCURRENCY,
      requestedBy: "bench",
    });
    if (created.status !== "created") throw new Error(`backfill refused: ${created.status}`);
    // the wake a backfill created through the API sends (src/engine/agendaEngine.ts), on Agenda's
    // default channel (agenda's BaseNotificationChannel: "agenda:jobs")
    await pool.query(
      `NOTIFY "agenda:jobs", '${JSON.stringify({ jobId: "00000000-0000-0000-0000-000000000000", jobName: BACKFILL_WAKE, nextRunAt: null, priority: 0, timestamp: new Date().toISOString() })}'`,
    );
    const id = created.backfill.id;
    const backfills = new Backfills(pool);
    let reads = 0;
    let consistent = true;
    let killed = false;
    let halfAt = Number.NaN;
    for (const deadline = Date.now() + 600_000; Date.now() < deadline; ) {
      const progress = await backfills.get(id);
      if (!progress) throw new Error("the backfill vanished");
      reads++;
      const { total, ...states } = progress.slots;
      if (Object.values(states).reduce((sum, n) => sum + n, 0) !== total || total !== count)
        consistent = false;
      if (!killed && progress.slots.succeeded >= count / 2) {
        const victim =
          workers.find((worker) =>
            worker.starts().some((start) => (start.slot ?? 0) < createdAt && start.at > Date.now() - 1_000),
          ) ?? workers[1];
        victim?.kill("SIGKILL");
        killed = true;
        halfAt = Date.now();
        context.progress(`backfill: SIGKILL to ${victim?.label} at ${progress.slots.succeeded}/${count}`);
      }
      if (progress.state === "done") break;
      await sleep(100);
    }
    const done = await backfills.get(id);
    if (done?.state !== "done") throw new Error(`the backfill did not finish: ${JSON.stringify(done)}`);
    const durationS = ((done.endedAt?.getTime() ?? Date.now()) - done.createdAt.getTime()) / 1000;
    const doneAt = Date.now();
    const starts = workers.flatMap((worker) => worker.starts());
    const records = await successCounts(pool, from, from + (count - 1) * 1_000);
    const backfillStarts = starts.filter((start) => start.slot !== null && start.slot < createdAt - 60_000);
    const startsPerSlot = new Map<number, number>();
    for (const start of backfillStarts)
      startsPerSlot.set(start.slot ?? 0, (startsPerSlot.get(start.slot ?? 0) ?? 0) + 1);
    const live = starts.filter((start) => start.slot !== null && start.slot >= baselineFrom);
    return {
      slots: count,
      concurrency: CONCURRENCY,
      processes: PROCESSES,
      durationS: round(durationS, 1) ?? durationS,
      slotsPerS: round(count / durationS, 1) ?? 0,
      firstStartS: round((Math.min(...backfillStarts.map((start) => start.at)) - createdAt) / 1000, 2),
      halfS: round((halfAt - createdAt) / 1000, 1),
      exactlyOnce: [...records.values()].filter((n) => n === 1).length,
      missing: count - records.size,
      duplicated: [...records.values()].filter((n) => n > 1).length,
      restarted: [...startsPerSlot.values()].filter((n) => n > 1).length,
      progressConsistent: consistent,
      progressReads: reads,
      liveBefore: lateness(live, baselineFrom + 2_000, createdAt),
      liveDuring: lateness(live, createdAt, doneAt - 1_000),
    };
  } finally {
    for (const worker of workers) worker.kill();
    await Promise.all(workers.map((worker) => worker.exited));
    await pool.end();
    await context.pg.dropDatabase(database).catch(() => {});
  }
}

/** Succeeded records per backfilled slot (ms). */
async function successCounts(pool: pg.Pool, from: number, to: number): Promise<Map<number, number>> {
  const result = await pool.query<{ slot: string; n: number }>(
    `SELECT meta->>'scheduledAt' AS slot, count(*)::int AS n FROM "${LOGS_TABLE}"
      WHERE job_name = 'bf00000' AND event = 'success' AND meta->>'outcome' = 'succeeded'
        AND meta->>'trigger' = 'backfill' AND meta->>'scheduledAt' >= $1 AND meta->>'scheduledAt' <= $2
      GROUP BY 1`,
    [new Date(from).toISOString(), new Date(to).toISOString()],
  );
  return new Map(result.rows.map((row) => [Date.parse(row.slot), row.n]));
}

/** The live slots of [from, to): start lateness of each slot's first start, and the slots never started. */
function lateness(live: Start[], from: number, to: number): LiveLateness {
  const first = new Map<number, number>();
  for (const start of live) {
    const slot = start.slot ?? 0;
    if (slot < from || slot >= to) continue;
    first.set(slot, Math.min(first.get(slot) ?? Number.POSITIVE_INFINITY, start.at - slot));
  }
  const expected = Math.max(0, Math.ceil(to / 1_000) - Math.ceil(from / 1_000));
  const values = [...first.values()];
  return {
    slots: expected,
    notStarted: Math.max(0, expected - first.size),
    p50Ms: values.length ? Math.round(percentile(values, 50)) : null,
    p99Ms: values.length ? Math.round(percentile(values, 99)) : null,
    maxMs: values.length ? Math.round(Math.max(...values)) : null,
  };
}

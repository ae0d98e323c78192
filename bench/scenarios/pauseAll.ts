/**
 * Pause all, cronwarden only (raw Agenda has no switch): three processes share `pauseTasks` tasks
 * on a 5 s cron whose handler takes 20 ms (poll and minimum interval 1 s). Each round turns the
 * namespace's switch on as `POST /pause-all` does (src/engine/sql/pauseAll.ts insertPause: the row
 * and its pg_notify in one transaction), at a different phase of the herd's 5 s period (before a
 * herd, while its runs are claimed ahead, after it), holds it for two periods, and lifts it.
 * Figures: the commit -> each process's gate holding the switch (its "pause-all is on" log line,
 * written once the gate holds it: src/engine/pauseGate.ts), the slowest of the three per round;
 * handler starts on a process after it applied the switch (the goal: none), and between the commit
 * and that; the lift's commit -> each process applied it.
 */

import { readFile } from "node:fs/promises";
import path from "node:path";
import pg from "pg";
import { deletePause, insertPause } from "../../src/engine/sql/pauseAll.js";
import type { Worker } from "../lib/children.js";
import { type BenchContext, percentile, prepareContender, round, sleep } from "../lib/common.js";

const PROCESSES = 3;
const TASK_MS = 20;
const PERIOD_MS = 5_000;
/** Where in the period each round's pause is committed (ms after a herd's slot; negative: before it). */
const PHASES_MS = [-300, 200, -1_200, 1_000, -700, 2_500];
const NAMESPACE = "default";

export interface PauseAllFigures {
  tasks: number;
  processes: number;
  rounds: number;
  /** Commit of the switch -> the last of the processes applied it (ms), per round: median and max. */
  applyMedianMs: number | null;
  applyMaxMs: number | null;
  /** The same for each process separately: the slowest seen. */
  applyMaxPerProcessMs: number | null;
  /** Handler starts on a process after it applied the switch, all rounds (the goal: 0). */
  startsAfterApplied: number;
  /** Handler starts between the commit and the process applying it, all rounds. */
  startsWhileApplying: number;
  /** Handler starts in the round's two periods before the pause, all rounds (the herd was running). */
  startsBefore: number;
  /** The lift's commit -> the last process applied it (ms): median and max. */
  liftMedianMs: number | null;
  liftMaxMs: number | null;
}

export async function runPauseAll(context: BenchContext): Promise<PauseAllFigures> {
  const count = context.sizes.pauseTasks;
  const database = "bench_pause";
  const tasks = { prefix: "pa", count, cron: "*/5 * * * * *" };
  const launch = await prepareContender(context, "cronwarden", database, tasks);
  const pool = new pg.Pool({ connectionString: context.pg.urlOf(database), max: 2 });
  const workers: Worker[] = [];
  try {
    const spec = { processEveryMs: 1_000, minIntervalMs: 1_000, taskMs: TASK_MS };
    workers.push(...Array.from({ length: PROCESSES }, (_, index) => launch(`pause-${index}`, spec)));
    await Promise.all(workers.map((worker) => worker.ready(120_000)));
    // two herds before the first round
    await sleep(2 * PERIOD_MS + 1_000);
    const rounds = context.quick ? 2 : PHASES_MS.length;
    const apply: number[] = [];
    const perProcess: number[] = [];
    const lift: number[] = [];
    let after = 0;
    let applying = 0;
    let before = 0;
    for (let index = 0; index < rounds; index++) {
      const phase = PHASES_MS[index % PHASES_MS.length] ?? 0;
      const nextSlot = Math.ceil((Date.now() + PERIOD_MS) / PERIOD_MS) * PERIOD_MS;
      await sleep(nextSlot + phase - Date.now());
      const heardBefore = await Promise.all(workers.map((worker) => logTimes(context, worker, PAUSED)));
      const committedAt = await flip(pool, true);
      const heard = await Promise.all(
        workers.map((worker, at) => nextLogTime(context, worker, PAUSED, heardBefore[at]?.length ?? 0)),
      );
      await sleep(2 * PERIOD_MS);
      const liftedBefore = await Promise.all(workers.map((worker) => logTimes(context, worker, LIFTED)));
      const liftedAt = await flip(pool, false);
      for (const [at, worker] of workers.entries()) {
        const applied = heard[at] as number;
        perProcess.push(applied - committedAt);
        for (const start of worker.starts()) {
          if (start.at > applied && start.at < liftedAt) after++;
          else if (start.at > committedAt && start.at <= applied) applying++;
          else if (start.at > committedAt - 2 * PERIOD_MS && start.at <= committedAt) before++;
        }
      }
      apply.push(Math.max(...heard) - committedAt);
      const lifted = await Promise.all(
        workers.map((worker, at) => nextLogTime(context, worker, LIFTED, liftedBefore[at]?.length ?? 0)),
      );
      lift.push(Math.max(...lifted) - liftedAt);
      context.progress(
        `pause-all round ${index + 1}/${rounds}: applied by all ${Math.max(...heard) - committedAt} ms after the commit`,
      );
      // the catch-up after the lift, before the next round
      await sleep(PERIOD_MS);
    }
    const median = (values: number[]) => (values.length ? round(percentile(values, 50), 0) : null);
    return {
      tasks: count,
      processes: PROCESSES,
      rounds,
      applyMedianMs: median(apply),
      applyMaxMs: apply.length ? Math.max(...apply) : null,
      applyMaxPerProcessMs: perProcess.length ? Math.max(...perProcess) : null,
      startsAfterApplied: after,
      startsWhileApplying: applying,
      startsBefore: before,
      liftMedianMs: median(lift),
      liftMaxMs: lift.length ? Math.max(...lift) : null,
    };
  } finally {
    await flip(pool, false).catch(() => undefined);
    for (const worker of workers) worker.kill();
    await Promise.all(workers.map((worker) => worker.exited));
    await pool.end();
    await context.pg.dropDatabase(database).catch(() => {});
  }
}

const PAUSED = /^pause-all is on/;
const LIFTED = /^pause-all lifted/;

/** Turns the switch on or off as the admin API does (its row and pg_notify in one transaction); the commit's time. */
async function flip(pool: pg.Pool, on: boolean): Promise<number> {
  const client = await pool.connect();
  try {
    await client.query("BEGIN");
    if (on) await insertPause(client, NAMESPACE, "bench", "bench round");
    else await deletePause(client, NAMESPACE);
    await client.query("COMMIT");
    return Date.now();
  } catch (error) {
    await client.query("ROLLBACK").catch(() => undefined);
    throw error;
  } finally {
    client.release();
  }
}

/** The times (ms) of a worker's log lines whose message matches. */
async function logTimes(context: BenchContext, worker: Worker, message: RegExp): Promise<number[]> {
  const text = await readFile(path.join(context.logDir, `${worker.label}.log`), "utf8").catch(() => "");
  const times: number[] = [];
  for (const line of text.split("\n")) {
    if (!line.startsWith("{")) continue;
    try {
      const entry = JSON.parse(line) as { msg?: string; time?: number };
      if (entry.msg && message.test(entry.msg) && typeof entry.time === "number") times.push(entry.time);
    } catch {
      // a line being written
    }
  }
  return times;
}

/** The time of the worker's first matching log line after the `seen` it had. */
async function nextLogTime(
  context: BenchContext,
  worker: Worker,
  message: RegExp,
  seen: number,
): Promise<number> {
  for (const deadline = Date.now() + 30_000; Date.now() < deadline; await sleep(50)) {
    const times = await logTimes(context, worker, message);
    if (times.length > seen) return times[seen] as number;
  }
  throw new Error(`${worker.label} did not log ${message} within 30 s`);
}

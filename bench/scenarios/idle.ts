/**
 * Idle load: N registered tasks, none due (a daily cron twelve hours away), default 5 s poll; transactions per
 * second on the contender's own database (pg_stat_database xact_commit + xact_rollback, delta over
 * a window after a settle). The same processes give the memory figure: VmRSS at the end of the
 * window (no forced GC). As in every scenario, both contenders run under plain node, cronwarden
 * from the compiled package (bench/lib/plainNode.ts).
 */
import type { Worker } from "../lib/children.js";
import {
  type BenchContext,
  CONTENDERS,
  type Contender,
  DEFAULT_PROCESS_EVERY_MS,
  farDailyCron,
  prepareContender,
  sleep,
} from "../lib/common.js";

const SETTLE_MS = 2 * DEFAULT_PROCESS_EVERY_MS;

export interface IdleFigures {
  tasks: number;
  tps: number;
  windowS: number;
  rssMb: number;
  setupMs: number;
  /** The first process failed to start and was started again (as a supervisor would): why. */
  firstStartError?: string;
}

type Key = 100 | 1000 | 10000;
export type IdleResult = Record<Contender, Partial<Record<Key, IdleFigures>>>;

interface Run {
  contender: Contender;
  key: Key;
  count: number;
  database: string;
  worker?: Worker;
  spawn?: (attempt: number) => Worker;
  firstStartError?: string;
}

export async function runIdle(context: BenchContext): Promise<IdleResult> {
  const keys: Key[] = [100, 1000, 10000];
  const runs: Run[] = [];
  for (const key of keys) {
    for (const contender of CONTENDERS) {
      runs.push({
        contender,
        key,
        count: context.sizes.idle[key],
        database: `bench_idle_${contender}_${key}`,
      });
    }
  }
  const result: IdleResult = { cronwarden: {}, agenda: {} };
  if (context.sizes.idleConcurrent) {
    const figures = await measure(context, runs);
    figures.forEach((figure, index) => {
      const run = runs[index];
      if (run) result[run.contender][run.key] = figure;
    });
  } else {
    for (const run of runs) {
      const [figure] = await measure(context, [run]);
      if (figure) result[run.contender][run.key] = figure;
    }
  }
  return result;
}

/** Starts the runs together, measures one shared window, stops them. */
async function measure(context: BenchContext, runs: Run[]): Promise<IdleFigures[]> {
  try {
    for (const run of runs) {
      const tasks = { prefix: "idle", count: run.count, cron: farDailyCron() };
      const launch = await prepareContender(context, run.contender, run.database, tasks);
      run.spawn = (attempt) =>
        launch(`idle-${run.contender}-${run.count}-${attempt}`, {
          processEveryMs: DEFAULT_PROCESS_EVERY_MS,
          minIntervalMs: 60_000,
          taskMs: 0,
        });
      run.worker = run.spawn(1);
    }
    const setups: number[] = [];
    for (const run of runs) {
      const timeoutMs = 120_000 + run.count * 30;
      try {
        setups.push((await run.worker?.ready(timeoutMs))?.setupMs ?? Number.NaN);
      } catch (error) {
        if (!run.spawn || !run.worker?.fatal) throw error;
        // a failed start: a supervisor would start the process again, on the same database
        run.firstStartError = firstErrorLine(error as Error);
        context.progress(
          `idle: ${run.contender} ${run.count} failed to start (${run.firstStartError}); starting it again`,
        );
        run.worker.kill();
        await run.worker.exited;
        run.worker = run.spawn(2);
        setups.push((await run.worker.ready(timeoutMs)).setupMs);
      }
    }
    const what = runs.map((run) => `${run.contender} ${run.count}`).join(", ");
    context.progress(
      `idle: ${what} ready; settle ${SETTLE_MS / 1000} s, window ${context.sizes.idleWindowMs / 1000} s`,
    );
    await sleep(SETTLE_MS);
    const before = await Promise.all(runs.map((run) => context.pg.transactions(run.database)));
    const began = performance.now();
    await sleep(context.sizes.idleWindowMs);
    const after = await Promise.all(runs.map((run) => context.pg.transactions(run.database)));
    const windowS = (performance.now() - began) / 1000;
    for (const run of runs) {
      if (!run.worker?.alive) throw new Error(`idle: ${run.contender} ${run.count} exited during the window`);
    }
    const rss = await Promise.all(runs.map((run) => run.worker?.rssBytes() ?? Number.NaN));
    // each run's figures as they come: a later run that fails (a start past its deadline on a
    // busy machine) does not take them with it
    runs.forEach((run, index) => {
      const tps = ((after[index] ?? Number.NaN) - (before[index] ?? Number.NaN)) / windowS;
      const rssMb = (rss[index] ?? Number.NaN) / (1024 * 1024);
      context.progress(
        `idle: ${run.contender} ${run.count}: ${tps.toFixed(2)} tps, VmRSS ${rssMb.toFixed(1)} MB`,
      );
    });
    return runs.map((run, index) => ({
      tasks: run.count,
      tps: ((after[index] ?? Number.NaN) - (before[index] ?? Number.NaN)) / windowS,
      windowS,
      rssMb: (rss[index] ?? Number.NaN) / (1024 * 1024),
      setupMs: setups[index] ?? Number.NaN,
      ...(run.firstStartError ? { firstStartError: run.firstStartError } : {}),
    }));
  } finally {
    await Promise.all(runs.map((run) => run.worker?.stop()));
    for (const run of runs) await context.pg.dropDatabase(run.database).catch(() => {});
  }
}

/** "<label> failed: Error: <message>" -> "<message>". */
function firstErrorLine(error: Error): string {
  const line = error.message.split("\n")[0] ?? "";
  return line
    .replace(/^.*? failed: /, "")
    .replace(/^(error|Error): /, "")
    .slice(0, 160);
}

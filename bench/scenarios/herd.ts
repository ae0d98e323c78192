/**
 * Herd: N tasks all due at the same second (a daily 6-field cron at a boundary a few seconds
 * ahead), default 5 s poll. Time from the boundary to the first and the last handler start, and
 * the runs of that slot: each task must start exactly once. Contenders one after the other, so
 * the burst has the machine to itself.
 */
import {
  type BenchContext,
  boundaryAfter,
  CONTENDERS,
  type Contender,
  DEFAULT_PROCESS_EVERY_MS,
  dailyCronAt,
  prepareContender,
  sleep,
  sleepUntil,
} from "../lib/common.js";

export interface HerdFigures {
  tasks: number;
  /** Handler starts for the boundary slot (the handlers' own record). */
  runs: number;
  /** Tasks that did not start exactly once. */
  wrongTasks: number;
  /** cronwarden: `success` rows in agenda_logs for the slot; Agenda (logging off by default): null. */
  logRuns: number | null;
  firstMs: number;
  lastMs: number;
  setupMs: number;
}

export async function runHerd(context: BenchContext): Promise<Record<Contender, HerdFigures>> {
  const result = {} as Record<Contender, HerdFigures>;
  for (const contender of CONTENDERS) {
    // cronwarden creates each job in turn and audits it; a set-up that overruns is retried below
    let margin = 8_000 + context.sizes.herdTasks * (contender === "cronwarden" ? 15 : 5);
    for (let attempt = 1; ; attempt++) {
      const figures = await herdOnce(context, contender, margin, attempt);
      if (figures) {
        result[contender] = figures;
        break;
      }
      if (attempt >= 3) throw new Error(`herd ${contender}: set-up never finished before the boundary`);
      margin *= 2;
      context.progress(`herd ${contender}: set-up overran the boundary; again with ${margin / 1000} s`);
    }
  }
  return result;
}

async function herdOnce(
  context: BenchContext,
  contender: Contender,
  marginMs: number,
  attempt: number,
): Promise<HerdFigures | undefined> {
  const count = context.sizes.herdTasks;
  const database = `bench_herd_${contender}`;
  const boundary = boundaryAfter(marginMs);
  const tasks = { prefix: "herd", count, cron: dailyCronAt(boundary) };
  const launch = await prepareContender(context, contender, database, tasks);
  const worker = launch(`herd-${contender}-${attempt}`, {
    processEveryMs: DEFAULT_PROCESS_EVERY_MS,
    minIntervalMs: 60_000,
    taskMs: 0,
  });
  try {
    const ready = await worker.ready(marginMs + 30_000);
    if (ready.at > boundary.getTime() - 500) return undefined;
    context.progress(
      `herd ${contender}: ${count} tasks ready in ${ready.setupMs} ms; boundary ${boundary.toISOString()}`,
    );
    const slot = boundary.getTime();
    const ofSlot = () => worker.starts().filter((start) => start.slot === slot || start.slot === null);
    await sleepUntil(slot);
    let complete = true;
    await worker
      .waitUntil(`${count} starts`, () => ofSlot().length >= count, 120_000)
      .catch((error: Error) => {
        if (!worker.alive) throw error;
        complete = false;
        context.progress(`herd ${contender}: only ${ofSlot().length} of ${count} started within 120 s`);
      });
    // late duplicates would show up within a couple of polls
    await sleep(2 * DEFAULT_PROCESS_EVERY_MS);
    const starts = ofSlot();
    const perTask = new Map<string, number>();
    for (const start of starts) perTask.set(start.task, (perTask.get(start.task) ?? 0) + 1);
    const times = starts.map((start) => start.at - slot);
    let logRuns: number | null = null;
    if (contender === "cronwarden") {
      const rows = await context.pg.query<{ runs: string }>(
        database,
        "SELECT count(*)::text AS runs FROM agenda_logs WHERE event = 'success' AND meta->>'scheduledAt' = $1",
        [boundary.toISOString()],
      );
      logRuns = Number(rows[0]?.runs ?? 0);
    }
    return {
      tasks: count,
      runs: starts.length,
      wrongTasks: count - [...perTask.values()].filter((runs) => runs === 1).length,
      logRuns,
      firstMs: Math.min(...times),
      lastMs: complete ? Math.max(...times) : Number.NaN,
      setupMs: ready.setupMs,
    };
  } finally {
    await worker.stop();
    await context.pg.dropDatabase(database).catch(() => {});
  }
}

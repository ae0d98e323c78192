/**
 * Herd: N tasks all due at the same second (a daily 6-field cron at a boundary a few seconds
 * ahead), default 5 s poll. Time from the boundary to the first and the last handler start, and
 * the runs of that slot: each task must start exactly once. Contenders one after the other, so
 * the burst has the machine to itself. `runHerd` has one process per contender; `runHerdShared`
 * several processes on one database sharing the herd (`herd-3`: 3 processes, 10,000 tasks).
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
import { canReadProcessCpu, cpuSnapshot, cpuUsedBetween } from "../lib/processCpu.js";

export interface HerdFigures {
  tasks: number;
  /** Processes sharing the herd (one database). */
  instances: number;
  /** Handler starts for the boundary slot (the handlers' own record). */
  runs: number;
  /** Tasks that did not start exactly once. */
  wrongTasks: number;
  /** cronwarden: `success` rows in agenda_logs for the slot; Agenda (logging off by default): null. */
  logRuns: number | null;
  firstMs: number;
  lastMs: number;
  setupMs: number;
  /**
   * CPU milliseconds per run of the slot, from CPU_LEAD_MS before the boundary (the claims and start
   * saves made ahead of it) to the last start: the contender's processes, and the PostgreSQL
   * server's (bench/lib/processCpu.ts). Null where /proc is not read.
   */
  cpuMsPerRun: { node: number; postgres: number } | null;
  /** herd-memory: the process's VmRSS 10 s after the herd's last start, and after an idle window (MB). */
  rssMb?: { afterHerd: number; idle: number; idleWindowS: number };
}

/** The CPU per run counts from this long before the boundary. */
const CPU_LEAD_MS = 10_000;

export function runHerd(context: BenchContext): Promise<Record<Contender, HerdFigures>> {
  return herdScenario(context, context.sizes.herdTasks, 1);
}

export function runHerdShared(context: BenchContext): Promise<Record<Contender, HerdFigures>> {
  return herdScenario(context, context.sizes.herdSharedTasks, 3);
}

async function herdScenario(
  context: BenchContext,
  count: number,
  instances: number,
): Promise<Record<Contender, HerdFigures>> {
  const result = {} as Record<Contender, HerdFigures>;
  for (const contender of CONTENDERS) {
    // cronwarden creates each job in turn and audits it; a set-up that overruns is retried below
    let margin = 8_000 + count * (contender === "cronwarden" ? 6 : 5);
    for (let attempt = 1; ; attempt++) {
      let figures: HerdFigures | undefined;
      try {
        figures = await herdOnce(context, contender, count, instances, margin, attempt);
      } catch (error) {
        // a contender whose processes never report ready (raw Agenda's three processes creating
        // 10,000 jobs at once) has no figure; the other contender's stand
        if (!(error instanceof Error) || !/no ready within/.test(error.message)) throw error;
        context.progress(`herd ${contender}: no figure (${error.message.split("\n")[0]})`);
        result[contender] = noFigures(count, instances);
        break;
      }
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

function noFigures(tasks: number, instances: number): HerdFigures {
  const none = Number.NaN;
  return {
    tasks,
    instances,
    runs: 0,
    wrongTasks: tasks,
    logRuns: null,
    firstMs: none,
    lastMs: none,
    setupMs: none,
    cpuMsPerRun: null,
  };
}

/**
 * herd-memory (cronwarden only): the shared herd's 10,000 tasks (2,000) on one process, and its
 * VmRSS 10 s after the last start and after the idle window that follows.
 */
export async function runHerdMemory(context: BenchContext): Promise<HerdFigures> {
  const count = context.sizes.herdSharedTasks;
  let margin = 8_000 + count * 6;
  for (let attempt = 1; attempt <= 3; attempt++) {
    const figures = await herdOnce(context, "cronwarden", count, 1, margin, attempt, undefined, {
      idleMs: context.sizes.idleWindowMs,
    });
    if (figures) return figures;
    margin *= 2;
  }
  throw new Error("herd-memory: set-up never finished before the boundary");
}

/**
 * The herd of cronwarden tasks once in-process (`none`) and once with `isolation: "worker"`
 * (bench/scenarios/isolation.ts), one process each, at the same settings.
 */
export async function herdIsolation(
  context: BenchContext,
  count: number,
  isolatedModule: string,
): Promise<{ none: HerdFigures; worker: HerdFigures }> {
  const result: Partial<Record<"none" | "worker", HerdFigures>> = {};
  for (const mode of ["none", "worker"] as const) {
    let margin = 8_000 + count * 6;
    for (let attempt = 1; ; attempt++) {
      const figures = await herdOnce(context, "cronwarden", count, 1, margin, attempt, {
        isolatedModule: mode === "worker" ? isolatedModule : undefined,
        tag: `iso_${mode}`,
      });
      if (figures) {
        result[mode] = figures;
        break;
      }
      if (attempt >= 3) throw new Error(`herd ${mode}: set-up never finished before the boundary`);
      margin *= 2;
    }
  }
  return result as { none: HerdFigures; worker: HerdFigures };
}

async function herdOnce(
  context: BenchContext,
  contender: Contender,
  count: number,
  instances: number,
  marginMs: number,
  attempt: number,
  isolation: { isolatedModule: string | undefined; tag: string } | undefined = undefined,
  memory: { idleMs: number } | undefined = undefined,
): Promise<HerdFigures | undefined> {
  const tag = isolation ? `_${isolation.tag}` : memory ? "_memory" : "";
  const database = `bench_herd${instances > 1 ? instances : ""}_${contender}${tag}`;
  const boundary = boundaryAfter(marginMs);
  const tasks = { prefix: "herd", count, cron: dailyCronAt(boundary) };
  const launch = await prepareContender(context, contender, database, tasks);
  const spawn = (index: number) =>
    launch(`herd${instances > 1 ? `${instances}-${index + 1}` : ""}-${contender}-${attempt}`, {
      processEveryMs: DEFAULT_PROCESS_EVERY_MS,
      minIntervalMs: 60_000,
      taskMs: 0,
      ...(isolation?.isolatedModule ? { isolatedModule: isolation.isolatedModule } : {}),
    });
  // the first process alone creates the schema (raw Agenda's processes race on creating its indexes)
  const workers = [spawn(0)];
  try {
    const readies = [await (workers[0] as (typeof workers)[number]).ready(marginMs + 30_000)];
    for (let index = 1; index < instances; index++) workers.push(spawn(index));
    readies.push(...(await Promise.all(workers.slice(1).map((each) => each.ready(marginMs + 30_000)))));
    if (readies.some((ready) => ready.at > boundary.getTime() - 500)) return undefined;
    const ready = { setupMs: Math.max(...readies.map((each) => each.setupMs)) };
    context.progress(
      `herd ${contender}: ${count} tasks on ${instances} process(es) ready in ${ready.setupMs} ms; boundary ${boundary.toISOString()}`,
    );
    const slot = boundary.getTime();
    const ofSlot = () =>
      workers.flatMap((each) => each.starts()).filter((start) => start.slot === slot || start.slot === null);
    const startedOfSlot = () =>
      workers.reduce((sum, each) => sum + each.startsOf(slot) + each.startsOf(null), 0);
    const serverPid = context.pg.serverPid();
    const workerPids = workers.map((each) => each.pid);
    const measureCpu = canReadProcessCpu() && serverPid !== undefined;
    // the claims of the slot and the start saves come before it (a poll's look-ahead, 6 s at defaults)
    await sleepUntil(slot - CPU_LEAD_MS);
    const cpuBefore = measureCpu
      ? { node: cpuSnapshot(workerPids), postgres: cpuSnapshot([serverPid], { children: true }) }
      : undefined;
    await sleepUntil(slot);
    let complete = true;
    // each process checks the shared count on its own messages: the one that reports the last start ends the wait
    await Promise.race(
      workers.map((each) => each.waitUntil(`${count} starts`, () => startedOfSlot() >= count, 120_000)),
    ).catch((error: Error) => {
      if (!workers.every((each) => each.alive)) throw error;
      complete = false;
      context.progress(`herd ${contender}: only ${startedOfSlot()} of ${count} started within 120 s`);
    });
    const cpuAfter =
      cpuBefore && serverPid !== undefined
        ? { node: cpuSnapshot(workerPids), postgres: cpuSnapshot([serverPid], { children: true }) }
        : undefined;
    // late duplicates would show up within a couple of polls
    await sleep(2 * DEFAULT_PROCESS_EVERY_MS);
    const mb = async () =>
      Math.round(((await (workers[0] as (typeof workers)[number]).rssBytes()) / 1_048_576) * 10) / 10;
    let rssMb: HerdFigures["rssMb"];
    if (memory) {
      const afterHerd = await mb();
      await sleep(memory.idleMs);
      rssMb = { afterHerd, idle: await mb(), idleWindowS: memory.idleMs / 1000 };
    }
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
      instances,
      runs: starts.length,
      wrongTasks: count - [...perTask.values()].filter((runs) => runs === 1).length,
      logRuns,
      firstMs: Math.min(...times),
      lastMs: complete ? Math.max(...times) : Number.NaN,
      setupMs: ready.setupMs,
      cpuMsPerRun:
        cpuBefore && cpuAfter && complete && starts.length > 0
          ? {
              node: cpuUsedBetween(cpuBefore.node, cpuAfter.node) / starts.length,
              postgres: cpuUsedBetween(cpuBefore.postgres, cpuAfter.postgres) / starts.length,
            }
          : null,
      ...(rssMb ? { rssMb } : {}),
    };
  } finally {
    await Promise.all(workers.map((each) => each.stop()));
    await context.pg.dropDatabase(database).catch(() => {});
  }
}

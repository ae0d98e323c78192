/**
 * Lateness at default settings: one task on `* * * * *`, both contenders at their own defaults
 * (nothing passed but the pool: cronwarden's minIntervalMs 60 s gives a 5 s poll, Agenda's
 * processEvery is 5 s; lock lifetime 15 s and 10 min). As a user would run it: several processes
 * per contender, each on its own database, each started at a random second of the minute, each
 * measuring the first N minute boundaries after it reported ready. For each boundary, handler
 * entry minus the slot. Contenders one after the other (as the herd), each with the machine to
 * itself: the i-th process of each starts at the same second of the minute, so the two see the
 * same start phases. (Run side by side, the other contender's processes woke at the same instant
 * on the same cores, and each contender's figures were partly the other's load.)
 *
 * A slot whose poll-ahead does not lock it waits for the next poll: late by up to 5 s here, which
 * the 1 s cron of bench/scenarios/lateness.ts cannot show (its poll is 0.5-1 s).
 */
import { type Worker, waitFor } from "../lib/children.js";
import {
  type BenchContext,
  CONTENDERS,
  type Contender,
  percentile,
  prepareContender,
  sleepUntil,
} from "../lib/common.js";

const CRON = "* * * * *";
const MINUTE_MS = 60_000;
/** A start this much past its slot counts as late (issue 19's bound). */
export const MINUTE_LATE_MS = 50;
/** After the last boundary: four polls and one cronwarden lock lifetime, for late starts and duplicates. */
const WATCH_MS = 20_000;

export interface MinuteProcess {
  /** Second of the minute (UTC) the process was spawned at. */
  startSecond: number;
  /** Process spawn -> ready (ms). */
  setupMs: number;
  /** Each measured boundary, in order: start minus slot (ms); null when it never started. */
  lateness: Array<number | null>;
}

export interface MinuteLatenessFigures {
  processes: number;
  /** Boundaries measured, all processes (the ones that started and the missed ones). */
  boundaries: number;
  p50: number;
  p99: number;
  max: number;
  /** Boundaries started more than 50 ms after their slot. */
  late: number;
  /** Boundaries that never started (by the end of the watch, 20 s after the last one). */
  missed: number;
  /** Boundaries that started more than once. */
  duplicates: number;
  /** Starts for a slot that is none of the measured boundaries (or an unknown slot). */
  otherStarts: number;
  perProcess: MinuteProcess[];
}

export type MinuteLatenessResult = Record<Contender, MinuteLatenessFigures>;

type Launcher = Awaited<ReturnType<typeof prepareContender>>;

export async function runMinuteLateness(context: BenchContext): Promise<MinuteLatenessResult> {
  const { latenessMinuteProcesses: processes } = context.sizes;
  // one random second of the minute per process index, the same for both contenders
  const phases = Array.from({ length: processes }, () => Math.floor(Math.random() * MINUTE_MS)).sort(
    (a, b) => a - b,
  );
  context.progress(
    `lateness-minute: ${processes} processes per contender at seconds ${phases
      .map((at) => (at / 1000).toFixed(1))
      .join(
        ", ",
      )}; ${context.sizes.latenessMinuteBoundaries} boundaries each; contenders one after the other`,
  );
  const measured: Measured[] = [];
  for (const contender of CONTENDERS) measured.push(...(await measureContender(context, contender, phases)));
  const result = {} as MinuteLatenessResult;
  for (const contender of CONTENDERS) {
    const mine = measured.filter((entry) => entry.contender === contender).sort((a, b) => a.index - b.index);
    const all = mine.flatMap((entry) => entry.process.lateness);
    const started = all.filter((ms): ms is number => ms !== null);
    result[contender] = {
      processes: mine.length,
      boundaries: all.length,
      p50: percentile(started, 50),
      p99: percentile(started, 99),
      max: started.length > 0 ? Math.max(...started) : Number.NaN,
      late: started.filter((ms) => ms > MINUTE_LATE_MS).length,
      missed: all.length - started.length,
      duplicates: mine.reduce((sum, entry) => sum + entry.duplicates, 0),
      otherStarts: mine.reduce((sum, entry) => sum + entry.otherStarts, 0),
      perProcess: mine.map((entry) => entry.process),
    };
  }
  return result;
}

interface Measured {
  contender: Contender;
  index: number;
  process: MinuteProcess;
  duplicates: number;
  otherStarts: number;
}

/** One contender's processes, started at `phases` (ms into the minute) of the coming minute. */
async function measureContender(
  context: BenchContext,
  contender: Contender,
  phases: number[],
): Promise<Measured[]> {
  const { latenessMinuteBoundaries: boundaries } = context.sizes;
  const databases: string[] = [];
  const launchers = new Map<number, Launcher>();
  const workers: Array<{ index: number; worker: Worker }> = [];
  try {
    for (const index of phases.keys()) {
      const database = `bench_lateness_minute_${contender}_${index}`;
      databases.push(database);
      launchers.set(
        index,
        await prepareContender(context, contender, database, { prefix: "minute", count: 1, cron: CRON }),
      );
    }
    const minute = (Math.floor((Date.now() + 1_000) / MINUTE_MS) + 1) * MINUTE_MS;
    const spawned: number[] = [];
    for (const [index, phase] of phases.entries()) {
      await sleepUntil(minute + phase);
      spawned[index] = Date.now();
      const launch = launchers.get(index);
      if (!launch) throw new Error(`no launcher for ${contender} ${index}`);
      // no poll, lock lifetime or minimum interval: each contender's own defaults
      const worker = launch(`lateness-minute-${contender}-${index}`, { taskMs: 0, lockLifetimeMs: null });
      workers.push({ index, worker });
    }
    return await Promise.all(
      workers.map(async ({ index, worker }) => {
        const ready = await worker.ready(60_000);
        const first = (Math.floor(ready.at / MINUTE_MS) + 1) * MINUTE_MS;
        const slots = Array.from({ length: boundaries }, (_, n) => first + n * MINUTE_MS);
        const until = first + (boundaries - 1) * MINUTE_MS + WATCH_MS;
        await waitFor(
          `${worker.label}: ${boundaries} boundaries watched`,
          () => Date.now() >= until,
          until - Date.now() + 10_000,
          [worker],
        );
        if (!worker.alive) throw new Error(`${worker.label} exited during the measurement`);
        const starts = worker.starts();
        const lateness = slots.map((slot) => {
          const times = starts.filter((start) => start.slot === slot).map((start) => start.at - slot);
          return times.length === 0 ? null : Math.min(...times);
        });
        const duplicates = slots.filter(
          (slot) => starts.filter((start) => start.slot === slot).length > 1,
        ).length;
        const otherStarts = starts.filter(
          (start) => start.slot === null || !slots.includes(start.slot),
        ).length;
        const process: MinuteProcess = {
          startSecond: Math.round(((spawned[index] ?? 0) % MINUTE_MS) / 100) / 10,
          setupMs: ready.setupMs,
          lateness,
        };
        context.progress(
          `lateness-minute ${worker.label}: ${lateness.map((ms) => (ms === null ? "missed" : `${ms} ms`)).join(", ")}`,
        );
        return { contender, index, process, duplicates, otherStarts };
      }),
    );
  } finally {
    await Promise.all(workers.map(({ worker }) => worker.stop()));
    for (const database of databases) await context.pg.dropDatabase(database).catch(() => {});
  }
}

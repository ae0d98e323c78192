/**
 * Rolling restart, cronwarden only (raw Agenda has no hand-off to measure): three processes,
 * `rollingTasks` tasks due every 10 s (the minimum interval lowered to 10 s) that each run 4 s,
 * lock lifetime 15 s, default 5 s poll. Each process in turn is stopped the way a deploy stops it
 * (a clean stop with a 2 s drain: runs still going are cut off, recorded interrupted and handed
 * off) and replaced by a new one, one process per slot, each stopped a second into the slot.
 * Over the slots expected from the first stop to two slots after the last replacement was ready
 * (tasks x slots): the slots no handler started for, split by their run record into those
 * recorded skipped by the overlap rule, those recorded skipped by the catch-up rule, and those
 * lost (no start and no record); starts of a slot beyond one plus its interrupted runs; the
 * interrupted runs, and how long after its cut-off each one's slot was re-run.
 */

import { LOGS_TABLE } from "../../src/engine/sql/tables.js";
import type { Worker } from "../lib/children.js";
import {
  type BenchContext,
  DEFAULT_PROCESS_EVERY_MS,
  median,
  prepareContender,
  round,
  sleep,
} from "../lib/common.js";
import type { WorkerMessage } from "../lib/protocol.js";

const SLOT_MS = 10_000;
const TASK_MS = 4_000;
const PROCESSES = 3;

export interface RollingFigures {
  tasks: number;
  /** Runs at once per process; null: the default (20). */
  maxConcurrency: number | null;
  restarts: number;
  /** Slots expected: tasks x slots of the window. */
  slots: number;
  /** Slots with no start and no run record. */
  lost: number;
  /** Slots with no start, recorded skipped by the overlap rule ("fell due while ..."). */
  skippedOverlap: number;
  /** Slots with no start, recorded skipped by the catch-up rule ("missed while nothing ran ..."). */
  skippedCatchUp: number;
  /** Slots with no start, recorded skipped for another reason (disabled, re-timed). */
  skippedOther: number;
  doubled: number;
  interrupted: number;
  /** Interrupted run's end -> its slot's re-run start (s). */
  rerunDelayMedianS: number | null;
  rerunDelayMaxS: number | null;
  /** Interrupted runs whose slot was never started again. */
  notRerun: number;
}

type Start = Extract<WorkerMessage, { type: "start" }>;
type Finish = Extract<WorkerMessage, { type: "finish" }>;

/** `maxConcurrency`: absent, the default (what users get); else the tuned run. */
export async function runRolling(context: BenchContext, maxConcurrency?: number): Promise<RollingFigures> {
  const tasks = { prefix: "roll", count: context.sizes.rollingTasks, cron: "*/10 * * * * *" };
  const database = `bench_rolling_${maxConcurrency ?? "default"}`;
  const launch = await prepareContender(context, "cronwarden", database, tasks);
  const spec = {
    processEveryMs: DEFAULT_PROCESS_EVERY_MS,
    minIntervalMs: SLOT_MS,
    taskMs: TASK_MS,
    ...(maxConcurrency === undefined ? {} : { maxConcurrency }),
  };
  const all: Worker[] = [];
  const start = async (label: string) => {
    const worker = launch(label, spec);
    all.push(worker);
    await worker.ready(60_000);
    return worker;
  };
  try {
    let fleet = await Promise.all(Array.from({ length: PROCESSES }, (_, index) => start(`rolling-${index}`)));
    await sleep(SLOT_MS);
    const from = Date.now();
    for (const [index, old] of [...fleet].entries()) {
      // stopped a second into a slot, its runs under way: the 2 s drain cuts them off at 3 s of 4
      await sleep(Math.ceil(Date.now() / SLOT_MS) * SLOT_MS + 1_000 - Date.now());
      context.progress(
        `rolling (max concurrency ${maxConcurrency ?? "default"}): restarting process ${index + 1}/${PROCESSES}`,
      );
      await old.stop(30_000);
      const replacement = await start(`rolling-${index}-new`);
      fleet = fleet.map((member) => (member === old ? replacement : member));
    }
    const until = Date.now() + 2 * SLOT_MS;
    await sleep(until - Date.now() + TASK_MS + 2 * DEFAULT_PROCESS_EVERY_MS);

    const starts = all.flatMap((worker) => worker.starts());
    const finishes = all.flatMap((worker) =>
      worker.messages.filter((message): message is Finish => message.type === "finish"),
    );
    const interrupted = interruptedRuns(starts, finishes);
    const skipped = await skippedRecords(context, database);
    const window = { tasks, from: Math.ceil(from / SLOT_MS) * SLOT_MS, until };
    return {
      tasks: tasks.count,
      maxConcurrency: maxConcurrency ?? null,
      restarts: PROCESSES,
      ...slotFigures(window, starts, interrupted, skipped),
      ...rerunFigures(starts, interrupted),
    };
  } finally {
    for (const worker of all) worker.kill();
    await Promise.all(all.map((worker) => worker.exited));
    await context.pg.dropDatabase(database).catch(() => {});
  }
}

/** An interrupted run: its process's last start of that task before the cut-off names the slot. */
function interruptedRuns(starts: Start[], finishes: Finish[]): Interrupted[] {
  return finishes
    .filter((finish) => finish.error !== null && /handed to another instance/.test(finish.error))
    .map((finish) => {
      const run = starts
        .filter((s) => s.pid === finish.pid && s.task === finish.task && s.at <= finish.at)
        .sort((a, b) => b.at - a.at)[0];
      return { task: finish.task, slot: run?.slot ?? null, at: finish.at };
    });
}

interface Interrupted {
  task: string;
  slot: number | null;
  at: number;
}

/** The skipped run records, by `task@slot` (ms): their reason. */
async function skippedRecords(context: BenchContext, database: string): Promise<Map<string, string>> {
  const rows = await context.pg.query<{ task: string; slot: string; detail: string | null }>(
    database,
    `SELECT job_name AS task, meta->>'scheduledAt' AS slot, meta->>'detail' AS detail
       FROM "${LOGS_TABLE}" WHERE event = 'success' AND meta->>'outcome' = 'skipped'`,
  );
  return new Map(rows.map((row) => [`${row.task}@${Date.parse(row.slot)}`, row.detail ?? ""]));
}

/** Each expected slot: started, or recorded skipped (by which rule), or lost; and starts beyond one. */
function slotFigures(
  window: { tasks: { prefix: string; count: number }; from: number; until: number },
  starts: Start[],
  interrupted: Interrupted[],
  skipped: Map<string, string>,
): Pick<RollingFigures, "slots" | "lost" | "skippedOverlap" | "skippedCatchUp" | "skippedOther" | "doubled"> {
  const interruptedPerSlot = new Map<string, number>();
  for (const run of interrupted) {
    const key = `${run.task}@${run.slot}`;
    interruptedPerSlot.set(key, (interruptedPerSlot.get(key) ?? 0) + 1);
  }
  const startsPerSlot = new Map<string, number>();
  for (const s of starts)
    startsPerSlot.set(`${s.task}@${s.slot}`, (startsPerSlot.get(`${s.task}@${s.slot}`) ?? 0) + 1);
  const figures = { slots: 0, lost: 0, skippedOverlap: 0, skippedCatchUp: 0, skippedOther: 0, doubled: 0 };
  for (let index = 0; index < window.tasks.count; index++) {
    const task = `${window.tasks.prefix}${String(index).padStart(5, "0")}`;
    for (let slot = window.from; slot <= window.until; slot += SLOT_MS) {
      figures.slots++;
      const key = `${task}@${slot}`;
      const count = startsPerSlot.get(key) ?? 0;
      figures.doubled += Math.max(0, count - 1 - (interruptedPerSlot.get(key) ?? 0));
      if (count > 0) continue;
      const reason = skipped.get(key);
      if (reason === undefined) figures.lost++;
      else if (/^fell due while/.test(reason)) figures.skippedOverlap++;
      else if (/^missed while nothing ran/.test(reason)) figures.skippedCatchUp++;
      else figures.skippedOther++;
    }
  }
  return figures;
}

/** How long after its cut-off each interrupted run's slot was started again. */
function rerunFigures(
  starts: Start[],
  interrupted: Interrupted[],
): Pick<RollingFigures, "interrupted" | "rerunDelayMedianS" | "rerunDelayMaxS" | "notRerun"> {
  const delays: number[] = [];
  let notRerun = 0;
  for (const run of interrupted) {
    const rerun = starts
      .filter((s) => s.task === run.task && s.slot === run.slot && s.rerun && s.at >= run.at - 50)
      .sort((a, b) => a.at - b.at)[0];
    if (rerun) delays.push((rerun.at - run.at) / 1000);
    else notRerun++;
  }
  return {
    interrupted: interrupted.length,
    rerunDelayMedianS: round(delays.length > 0 ? median(delays) : null, 2),
    rerunDelayMaxS: round(delays.length > 0 ? Math.max(...delays) : null, 2),
    notRerun,
  };
}

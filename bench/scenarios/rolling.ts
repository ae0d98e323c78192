/**
 * Rolling restart, cronwarden only (raw Agenda has no hand-off to measure): three processes,
 * `rollingTasks` tasks due every 10 s (the minimum interval lowered to 10 s) that each run 4 s,
 * lock lifetime 15 s, default 5 s poll. Each process in turn is stopped the way a deploy stops it
 * (a clean stop with a 2 s drain: runs still going are cut off, recorded interrupted and handed
 * off) and replaced by a new one, one process per slot, each stopped a second into the slot.
 * Over the slots from the first stop to two slots after the last replacement was ready: slots that
 * never started (and were not covered by a late start of an earlier slot), starts of a slot beyond
 * one plus its interrupted runs, the interrupted runs, and how long after its cut-off each one's
 * slot was re-run.
 */
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
  slots: number;
  lost: number;
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
    // an interrupted run: its process's last start of that task before the cut-off names the slot
    const interrupted = finishes
      .filter((finish) => finish.error !== null && /handed to another instance/.test(finish.error))
      .map((finish) => {
        const run = starts
          .filter((s) => s.pid === finish.pid && s.task === finish.task && s.at <= finish.at)
          .sort((a, b) => b.at - a.at)[0];
        return { task: finish.task, slot: run?.slot ?? null, at: finish.at };
      });
    const interruptedPerSlot = new Map<string, number>();
    for (const run of interrupted) {
      const key = `${run.task}@${run.slot}`;
      interruptedPerSlot.set(key, (interruptedPerSlot.get(key) ?? 0) + 1);
    }
    const startsPerSlot = new Map<string, Start[]>();
    for (const s of starts) {
      const key = `${s.task}@${s.slot}`;
      startsPerSlot.set(key, [...(startsPerSlot.get(key) ?? []), s]);
    }
    let slots = 0;
    let lost = 0;
    let doubled = 0;
    const firstSlot = Math.ceil(from / SLOT_MS) * SLOT_MS;
    for (let index = 0; index < tasks.count; index++) {
      const task = `${tasks.prefix}${String(index).padStart(5, "0")}`;
      for (let slot = firstSlot; slot <= until; slot += SLOT_MS) {
        slots++;
        const key = `${task}@${slot}`;
        const count = startsPerSlot.get(key)?.length ?? 0;
        const covered = starts.some((s) => s.task === task && (s.slot ?? slot) < slot && s.at >= slot);
        if (count === 0 && !covered) lost++;
        doubled += Math.max(0, count - 1 - (interruptedPerSlot.get(key) ?? 0));
      }
    }
    const delays: number[] = [];
    let notRerun = 0;
    for (const run of interrupted) {
      const rerun = (startsPerSlot.get(`${run.task}@${run.slot}`) ?? [])
        .filter((s) => s.rerun && s.at >= run.at - 50)
        .sort((a, b) => a.at - b.at)[0];
      if (rerun) delays.push((rerun.at - run.at) / 1000);
      else notRerun++;
    }
    return {
      tasks: tasks.count,
      maxConcurrency: maxConcurrency ?? null,
      restarts: PROCESSES,
      slots,
      lost,
      doubled,
      interrupted: interrupted.length,
      rerunDelayMedianS: round(delays.length > 0 ? median(delays) : null, 2),
      rerunDelayMaxS: round(delays.length > 0 ? Math.max(...delays) : null, 2),
      notRerun,
    };
  } finally {
    for (const worker of all) worker.kill();
    await Promise.all(all.map((worker) => worker.exited));
    await context.pg.dropDatabase(database).catch(() => {});
  }
}

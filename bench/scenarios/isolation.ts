/**
 * Isolation (docs/isolation.md): what running a handler in a worker thread or a child process
 * costs over running it in-process.
 * - Dispatch: one handler that returns at once, run back to back through the scheduler's module
 *   handlers (src/isolation/moduleHandlers.ts, the warm pool), per mode; the rest of a run's path
 *   (claim, start save, end save) is the same in every mode, so the difference of the medians is
 *   isolation's cost per run.
 * - Herd: the herd scenario (bench/scenarios/herd.ts) with in-process handlers and with
 *   `isolation: "worker"`, one process each; for the isolated herd the last start is the last
 *   handler's end as the scheduler saw it (an upper bound: the worker cannot report its start).
 */
import path from "node:path";
import { Writable } from "node:stream";
import { createLogger } from "../../src/core/logger.js";
import { parseIsolation } from "../../src/isolation/isolationSpec.js";
import { ModuleHandlers, type ModuleTask } from "../../src/isolation/moduleHandlers.js";
import type { TaskContext } from "../../src/scheduler/taskDefinition.js";
import { repoRoot } from "../lib/children.js";
import { type BenchContext, median, percentile, round } from "../lib/common.js";
import { type HerdFigures, herdIsolation } from "./herd.js";

export interface DispatchFigures {
  runs: number;
  medianMs: number | null;
  p99Ms: number | null;
}

export interface IsolationFigures {
  /** A handler that returns at once: an in-process function, and a module's export per mode. */
  dispatch: Record<"function" | "none" | "worker" | "process", DispatchFigures>;
  herd: { none: HerdFigures; worker: HerdFigures };
}

const WARM_UP_RUNS = 50;
const MODULE = path.join(repoRoot, "bench", "workers", "isolatedTask.mjs");

export async function runIsolation(context: BenchContext): Promise<IsolationFigures> {
  const runs = context.quick ? 300 : 2000;
  const dispatch = {} as IsolationFigures["dispatch"];
  const logger = createLogger({
    level: "info",
    destination: new Writable({ write: (_c, _e, done) => done() }),
  });
  const handlers = new ModuleHandlers({ logger, graceMs: 1000 });
  try {
    dispatch.function = await timed(runs, () => Promise.resolve(undefined));
    for (const mode of ["none", "worker", "process"] as const) {
      const task: ModuleTask = {
        name: `dispatch-${mode}`,
        module: parseIsolation(
          { isolation: mode, module: MODULE, hasHandler: false },
          "bench",
        ) as ModuleTask["module"],
        secrets: [],
        timeoutMs: 10_000,
      };
      dispatch[mode] = await timed(runs, () => handlers.run(task, contextOf(task.name, logger), {}));
      context.progress(`isolation dispatch ${mode}: median ${dispatch[mode].medianMs} ms over ${runs} runs`);
    }
  } finally {
    handlers.close();
  }
  const herd = await herdIsolation(context, context.sizes.herdTasks, MODULE);
  context.progress(
    `isolation herd: last start ${round(herd.none.lastMs)} ms in-process, ${round(herd.worker.lastMs)} ms isolated`,
  );
  return { dispatch, herd };
}

/** Median and p99 of `runs` sequential calls, after a warm-up (the pool's first host starts cold). */
async function timed(runs: number, call: () => Promise<unknown>): Promise<DispatchFigures> {
  for (let index = 0; index < WARM_UP_RUNS; index++) await call();
  const times: number[] = [];
  for (let index = 0; index < runs; index++) {
    const began = performance.now();
    await call();
    times.push(performance.now() - began);
  }
  return { runs, medianMs: round(median(times), 3), p99Ms: round(percentile(times, 99), 3) };
}

function contextOf(taskName: string, logger: TaskContext["logger"]): TaskContext {
  const now = new Date();
  return {
    taskName,
    scheduledAt: now,
    startedAt: now,
    attempt: 1,
    signal: new AbortController().signal,
    runKey: `${taskName}@${now.toISOString()}`,
    rerunOf: undefined,
    logger,
    instanceId: "bench",
    upstreams: [],
    trigger: "schedule",
    secrets: {},
  };
}

/**
 * One cronwarden instance for the bench: a Scheduler on its own pg Pool, `tasks.count` registered
 * tasks, the desired state from the file the orchestrator wrote. Reports every handler start.
 */
import { createWriteStream } from "node:fs";
import { setTimeout as sleep } from "node:timers/promises";
import pg from "pg";
import { contenderWorker } from "../lib/contenderWorker.js";
import { taskName } from "../lib/protocol.js";

const worker = contenderWorker();
const { spec } = worker;
// the source under tsx; the compiled package (dist/) under plain node (bench/lib/plainNode.ts)
const { createLogger, createScheduler, FileConfigSource }: typeof import("../../src/index.js") = await import(
  spec.cronwardenEntry ?? "../../src/index.js"
);

if (!spec.configFile) throw new Error("cronwarden worker: configFile is required");
const pool = new pg.Pool({ connectionString: spec.databaseUrl, max: spec.poolMax });
const logger = createLogger({
  level: "info",
  destination: spec.logFile ? createWriteStream(spec.logFile, { flags: "a" }) : process.stderr,
});
const scheduler = createScheduler({
  pool,
  config: new FileConfigSource({ path: spec.configFile }),
  logger,
  instanceId: `${worker.label}:${worker.pid}`,
  minIntervalMs: spec.minIntervalMs,
  processEveryMs: spec.processEveryMs,
  lockLifetimeMs: spec.lockLifetimeMs,
  ...(spec.maxConcurrency === undefined ? {} : { maxConcurrency: spec.maxConcurrency }),
});

const isolatedModule = spec.isolatedModule;
for (let index = 0; index < spec.tasks.count; index++) {
  const name = taskName(spec.tasks.prefix, index);
  if (isolatedModule) {
    scheduler.register({ name, isolation: "worker", module: isolatedModule });
    continue;
  }
  scheduler.register({
    name,
    handler: async (context) => {
      worker.started(context.taskName, context.scheduledAt.getTime(), context.rerunOf !== undefined);
      if (spec.taskMs > 0) await sleep(spec.taskMs, undefined, { signal: context.signal });
    },
  });
}
if (spec.sharding) {
  const { shardMs, mapItems } = spec.sharding;
  const handler = async (context: { signal: AbortSignal; shard?: { index: number } }) => {
    if (shardMs > 0) await sleep(shardMs, undefined, { signal: context.signal });
    return context.shard?.index ?? null;
  };
  const reduce = async (context: { taskName: string; scheduledAt: Date }, results: readonly unknown[]) => {
    await pool.query(
      "INSERT INTO bench_reduces (task, slot, instance, results, at) VALUES ($1, $2, $3, $4, clock_timestamp())",
      [context.taskName, context.scheduledAt, `${worker.label}:${worker.pid}`, results.length],
    );
  };
  scheduler.register({ name: "sharded", handler, reduce });
  scheduler.register({
    name: "mapped",
    handler,
    map: () => Array.from({ length: mapItems }, (_, index) => `item-${index}`),
    reduce,
  });
}
scheduler.on("run:finished", (event) => {
  // an isolated handler runs in a worker thread, which cannot reach the orchestrator: its "start"
  // is reported when its run ends (a handler that returns at once: an upper bound of its start)
  if (isolatedModule) worker.started(event.taskName, event.scheduledAt.getTime(), event.rerun);
  worker.finished(event.taskName, event.error?.message ?? null);
});

await worker.run({
  start: () => scheduler.start(),
  stop: async () => {
    await scheduler.stop({ drainTimeoutMs: 2_000 }).catch(() => undefined);
    await pool.end();
  },
});

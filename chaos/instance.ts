/**
 * One service instance of the chaos run (started by chaos/run.ts as its own OS process): a
 * Scheduler on its own pg Pool, `taskCount` registered tasks, the desired state from the shared
 * watched file. Each handler writes its start and end to this instance's journal (JSON lines,
 * written synchronously before and after the handler's work, so they survive a SIGKILL and a
 * database outage); the orchestrator loads the journals into the `chaos_handler_runs` table.
 * A handler takes 0-3 s, derived from the seed and the run, so a replay asks for the same work;
 * the first `longTaskCount` tasks (none in the chaos run) take `longTaskMs` each.
 */
import { closeSync, createWriteStream, openSync, writeSync } from "node:fs";
import { setTimeout as sleep } from "node:timers/promises";
import pg from "pg";
import { createLogger, createScheduler, FileConfigSource, handleShutdownSignals } from "../src/index.js";
import { hashToUnit } from "./lib/random.js";
import {
  type InstanceSpec,
  type JournalLine,
  MAX_SHARD_MS,
  SHARDED_TASK,
  type ShardJournalLine,
  taskNameOf,
} from "./lib/spec.js";

const text = process.env.CHAOS_SPEC;
if (!text) throw new Error("CHAOS_SPEC is not set: instances are started by chaos/run.ts");
const spec = JSON.parse(text) as InstanceSpec;
const instanceId = `${spec.label}:${process.pid}`;

// The orchestrator went away (it crashed or was interrupted): nothing is left to check this run.
process.on("disconnect", () => process.exit(0));

const logger = createLogger({ level: "info", destination: createWriteStream(spec.logFile, { flags: "a" }) });
const journal = openSync(spec.journalFile, "a");
const record = (line: JournalLine) => writeSync(journal, `${JSON.stringify(line)}\n`);

const pool = new pg.Pool({ connectionString: spec.databaseUrl, max: spec.poolMax });
pool.on("error", () => {}); // idle clients dropped by a PostgreSQL restart; the scheduler reports outages
const scheduler = createScheduler({
  pool,
  config: new FileConfigSource({ path: spec.configFile }),
  logger,
  instanceId,
  minIntervalMs: spec.minIntervalMs,
  processEveryMs: spec.processEveryMs,
  lockLifetimeMs: spec.lockLifetimeMs,
  maxConcurrency: spec.maxConcurrency,
  healthProbeMs: spec.healthProbeMs,
  drainTimeoutMs: spec.drainTimeoutMs,
});

for (let index = 0; index < spec.taskCount; index++) {
  scheduler.register({
    name: taskNameOf(index),
    handler: async (context) => {
      const slot = context.scheduledAt.toISOString();
      const base = {
        task: context.taskName,
        slot,
        instance: instanceId,
        pid: process.pid,
        attempt: context.attempt,
      };
      record({
        ...base,
        event: "start",
        at: Date.now(),
        rerunOf: context.rerunOf ? (context.rerunOf.scheduledAt?.toISOString() ?? "unknown") : null,
      });
      const workMs =
        index < (spec.longTaskCount ?? 0)
          ? (spec.longTaskMs ?? 0)
          : Math.floor(hashToUnit(`${spec.seed}:${context.runKey}:${context.attempt}`) * spec.maxTaskMs);
      try {
        await sleep(workMs, undefined, { signal: context.signal });
      } catch (error) {
        record({ ...base, event: "end", at: Date.now(), error: String((error as Error).message ?? error) });
        throw error;
      }
      record({ ...base, event: "end", at: Date.now(), error: null });
    },
  });
}

// The sharded task: each shard and the reduce write their start and end to the shard journal,
// synchronously like the handlers above (chaos/lib/shardCheck.ts reads it).
const shardJournal = openSync(spec.shardJournalFile ?? spec.journalFile.replace("journal-", "shards-"), "a");
const shardRecord = (line: ShardJournalLine) => writeSync(shardJournal, `${JSON.stringify(line)}\n`);
const shardLine = (context: { taskName: string; scheduledAt: Date }, index: number) => ({
  task: context.taskName,
  slot: context.scheduledAt.toISOString(),
  index,
  instance: instanceId,
  pid: process.pid,
});
scheduler.register({
  name: SHARDED_TASK,
  handler: async (context) => {
    const index = context.shard?.index ?? -1;
    shardRecord({ ...shardLine(context, index), event: "shard-start", at: Date.now() });
    const workMs = Math.floor(hashToUnit(`${spec.seed}:${context.runKey}:${index}`) * MAX_SHARD_MS);
    try {
      await sleep(workMs, undefined, { signal: context.signal });
    } catch (error) {
      const message = String((error as Error).message ?? error);
      shardRecord({ ...shardLine(context, index), event: "shard-end", at: Date.now(), error: message });
      throw error;
    }
    shardRecord({ ...shardLine(context, index), event: "shard-end", at: Date.now(), error: null });
    return { index };
  },
  reduce: async (context, results) => {
    shardRecord({
      ...shardLine(context, -1),
      event: "reduce-start",
      at: Date.now(),
      results: results.length,
    });
    shardRecord({ ...shardLine(context, -1), event: "reduce-end", at: Date.now(), error: null });
  },
});

// As the reference service does (service/runService.ts): logged, never fatal; the chaos run counts these lines.
process.on("unhandledRejection", (reason) => {
  logger.error(
    { err: reason },
    "unhandled promise rejection (a cronwarden bug: please report it); the service keeps running",
  );
});
handleShutdownSignals({
  logger,
  shutdown: async () => {
    await scheduler.stop();
    // a client still checked out here makes pool.end() wait forever: the log says which wait hung
    logger.info(
      { checkedOut: pool.totalCount - pool.idleCount, waiting: pool.waitingCount },
      "scheduler stopped; ending the pool",
    );
    await pool.end();
    closeSync(journal);
    closeSync(shardJournal);
  },
});

try {
  await scheduler.start();
  process.send?.({ type: "ready", at: Date.now() });
} catch (error) {
  logger.fatal({ err: error }, "scheduler start failed");
  process.exitCode = 1;
  await pool.end().catch(() => {});
  process.exit(1);
}

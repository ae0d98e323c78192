/**
 * One cronwarden instance for the bench: a Scheduler on its own pg Pool, `tasks.count` registered
 * tasks, the desired state from the file the orchestrator wrote. Reports every handler start.
 */
import { createWriteStream } from "node:fs";
import { setTimeout as sleep } from "node:timers/promises";
import pg from "pg";
import { createLogger, createScheduler, FileConfigSource } from "../../src/index.js";
import {
  type ContenderSpec,
  exitWithParent,
  type ParentMessage,
  readSpec,
  send,
  taskName,
} from "../lib/protocol.js";

exitWithParent();
const spec = readSpec<ContenderSpec>();
const pid = process.pid;
const label = spec.label;
const began = Date.now();

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
  instanceId: `${label}:${pid}`,
  minIntervalMs: spec.minIntervalMs,
  processEveryMs: spec.processEveryMs,
  lockLifetimeMs: spec.lockLifetimeMs,
});

for (let index = 0; index < spec.tasks.count; index++) {
  scheduler.register({
    name: taskName(spec.tasks.prefix, index),
    handler: async (context) => {
      const at = Date.now();
      send({
        type: "start",
        label,
        pid,
        task: context.taskName,
        slot: context.scheduledAt.getTime(),
        at,
        rerun: context.rerunOf !== undefined,
      });
      if (spec.taskMs > 0) await sleep(spec.taskMs, undefined, { signal: context.signal });
    },
  });
}
scheduler.on("run:finished", (event) =>
  send({
    type: "finish",
    label,
    pid,
    task: event.taskName,
    at: Date.now(),
    error: event.error?.message ?? null,
  }),
);

process.on("message", (message: ParentMessage) => {
  if (message.type !== "stop") return;
  void (async () => {
    await scheduler.stop({ drainTimeoutMs: 2_000 }).catch(() => undefined);
    await pool.end().catch(() => undefined);
    send({ type: "stopped", label, pid });
    process.exit(0);
  })();
});

try {
  await scheduler.start();
  send({ type: "ready", label, pid, at: Date.now(), setupMs: Date.now() - began });
} catch (error) {
  send({ type: "fatal", label, pid, message: (error as Error).stack ?? String(error) });
  process.exit(1);
}

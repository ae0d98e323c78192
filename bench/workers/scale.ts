/**
 * One instance of the scale scenario (bench/scenarios/scale.ts): a Scheduler at its defaults on
 * its own pg Pool, every task of the config file registered, the desired state from that file.
 * Reports each config load and each reconcile (its trigger, what it applied) with its time by
 * this process's clock; the orchestrator reads the database and the process's memory itself.
 */
import { createWriteStream } from "node:fs";
import pg from "pg";
import { exitWithParent, readSpec, type ScaleSpec, send, taskName } from "../lib/protocol.js";

exitWithParent();
const spec = readSpec<ScaleSpec>();
const { label } = spec;
const pid = process.pid;
// the source under tsx; the compiled package (dist/) under plain node (bench/lib/plainNode.ts)
const { createLogger, createScheduler, FileConfigSource }: typeof import("../../src/index.js") = await import(
  spec.cronwardenEntry ?? "../../src/index.js"
);

const pool = new pg.Pool({ connectionString: spec.databaseUrl, max: spec.poolMax });
pool.on("error", () => {});
const scheduler = createScheduler({
  pool,
  // a config of 100,000 tasks is about 5 MB and 400,000 nodes, over the file source's defaults
  config: new FileConfigSource({ path: spec.configFile, maxBytes: 64 * 1_048_576, maxNodes: 2_000_000 }),
  logger: createLogger({ level: "info", destination: createWriteStream(spec.logFile, { flags: "a" }) }),
  instanceId: `${label}:${pid}`,
});
for (let index = 0; index < spec.names.count; index++)
  scheduler.register({ name: taskName(spec.names.prefix, index), handler: async () => {} });

const report = (
  kind: "loaded" | "reconciled" | "failed",
  revision: string,
  extra: { trigger?: string; applied?: number; message?: string } = {},
) =>
  send({
    type: "scale",
    label,
    pid,
    kind,
    revision,
    trigger: extra.trigger ?? null,
    applied: extra.applied ?? null,
    at: Date.now(),
    message: extra.message ?? null,
  });
let lastRevision = "";
scheduler.on("config:loaded", ({ revision }) => {
  lastRevision = revision;
  report("loaded", revision);
});
scheduler.on("reconciled", (result) =>
  report("reconciled", result.revision, { trigger: result.trigger, applied: result.applied.length }),
);
scheduler.on("reconcile:failed", ({ error, trigger }) =>
  report("failed", lastRevision, { trigger, message: error.message.split("\n")[0] ?? "" }),
);

process.on("message", async (message: { type?: string }) => {
  if (message?.type !== "stop") return;
  await scheduler.stop({ drainTimeoutMs: 2_000 }).catch(() => {});
  await pool.end().catch(() => {});
  send({ type: "stopped", label, pid });
  process.exit(0);
});

try {
  const began = performance.now();
  await scheduler.start();
  send({ type: "ready", label, pid, at: Date.now(), setupMs: Math.round(performance.now() - began) });
} catch (error) {
  send({ type: "fatal", label, pid, message: (error as Error).stack ?? String(error) });
  process.exit(1);
}

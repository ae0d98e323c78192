/**
 * `npm run bench [-- --quick] [-- --only=lateness,lateness-minute,herd,herd-3,idle,failover,partition,rolling,reconcile,isolation,search,backfill,sharding] [-- --keep]
 *  [-- --node-flags="--max-semi-space-size=2"]` (node options of the contender workers, which run under plain node)
 *
 * cronwarden against raw Agenda on one machine: one embedded PostgreSQL in a temp dir, one
 * database per scenario and contender, each contender in its own OS process. Progress goes to
 * stderr; stdout gets a markdown report and, as its last line, one line of JSON.
 * Child processes and PostgreSQL are cleaned up on success, failure, timeout and Ctrl-C.
 */
import { mkdir, mkdtemp, rm } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { killAllWorkers } from "./lib/children.js";
import { type BenchContext, FULL, QUICK } from "./lib/common.js";
import { codeVersion, describeMachine } from "./lib/machine.js";
import { type BenchPostgres, startBenchPostgres } from "./lib/postgres.js";
import { jsonLine, markdown, type Results } from "./lib/report.js";
import { runBackfill } from "./scenarios/backfill.js";
import { runFailover, runPartition } from "./scenarios/failover.js";
import { runHerd, runHerdMemory, runHerdShared } from "./scenarios/herd.js";
import { runIdle } from "./scenarios/idle.js";
import { runIsolation } from "./scenarios/isolation.js";
import { runLateness } from "./scenarios/lateness.js";
import { runMinuteLateness } from "./scenarios/latenessMinute.js";
import { runPauseAll } from "./scenarios/pauseAll.js";
import { runReconcile } from "./scenarios/reconcile.js";
import { runRolling } from "./scenarios/rolling.js";
import { runScale } from "./scenarios/scale.js";
import { runSearch } from "./scenarios/search.js";
import { runSharding } from "./scenarios/sharding.js";
import { runTimerFloor } from "./scenarios/timerFloor.js";

const SCENARIOS = [
  "lateness",
  "lateness-minute",
  "herd",
  "herd-3",
  "herd-memory",
  "idle",
  "failover",
  "partition",
  "rolling",
  "reconcile",
  "isolation",
  "search",
  "backfill",
  "pause-all",
  "scale",
  "sharding",
] as const;
type Scenario = (typeof SCENARIOS)[number];

const args = process.argv.slice(2);
const quick = args.includes("--quick");
const keep = args.includes("--keep");
const onlyArg = args.find((arg) => arg.startsWith("--only="));
const only = onlyArg
  ? onlyArg
      .slice("--only=".length)
      .split(",")
      .map((name) => name.trim())
  : [...SCENARIOS];
for (const name of only) {
  if (!(SCENARIOS as readonly string[]).includes(name)) {
    console.error(`unknown scenario "${name}"; choose from ${SCENARIOS.join(", ")}`);
    process.exit(2);
  }
}
const nodeFlagsArg = args.find((arg) => arg.startsWith("--node-flags="));
const nodeFlags = nodeFlagsArg ? nodeFlagsArg.slice("--node-flags=".length).split(/\s+/).filter(Boolean) : [];
const unknown = args.filter(
  (arg) =>
    !["--quick", "--keep"].includes(arg) && !arg.startsWith("--only=") && !arg.startsWith("--node-flags="),
);
if (unknown.length > 0) {
  console.error(
    `unknown argument(s): ${unknown.join(" ")}\nusage: npm run bench [-- --quick] [--only=a,b] [--keep] [--node-flags="--flag ..."]`,
  );
  process.exit(2);
}
const sizes = quick ? QUICK : FULL;
const overallTimeoutMs = quick ? 15 * 60_000 : 120 * 60_000;

const began = performance.now();
const startedAt = new Date();
const progress = (message: string) =>
  process.stderr.write(
    `[bench ${((performance.now() - began) / 1000).toFixed(0).padStart(4)} s] ${message}\n`,
  );

let dir: string | undefined;
let server: BenchPostgres | undefined;
let cleaning: Promise<void> | undefined;
let interrupted = false;

/** Stops every worker and PostgreSQL; removes the work dir, except its logs after a failure. */
function cleanUp(failed = false): Promise<void> {
  cleaning ??= (async () => {
    await killAllWorkers().catch(() => {});
    await server?.stop().catch((error: unknown) => progress(`could not stop PostgreSQL: ${String(error)}`));
    if (!dir) return;
    if (keep) {
      progress(`kept ${dir}`);
      return;
    }
    if (failed) {
      await rm(path.join(dir, "pg"), { recursive: true, force: true }).catch(() => {});
      progress(`logs kept in ${path.join(dir, "logs")}`);
      return;
    }
    await rm(dir, { recursive: true, force: true }).catch(() => {});
  })();
  return cleaning;
}

function abort(reason: string, code: number): void {
  interrupted = true;
  progress(reason);
  void cleanUp(code !== 130 && code !== 143).finally(() => process.exit(code));
}

process.on("SIGINT", () => abort("interrupted: cleaning up", 130));
process.on("SIGTERM", () => abort("terminated: cleaning up", 143));
process.on("uncaughtException", (error) => abort(`uncaught: ${error.stack ?? error.message}`, 1));
process.on("unhandledRejection", (reason) => abort(`unhandled rejection: ${String(reason)}`, 1));
const overall = setTimeout(
  () => abort(`the bench took longer than ${overallTimeoutMs / 60_000} min: giving up`, 1),
  overallTimeoutMs,
);
overall.unref();

async function main(): Promise<void> {
  dir = await mkdtemp(path.join(os.tmpdir(), "cronwarden-bench-"));
  const logDir = path.join(dir, "logs");
  await mkdir(logDir);
  progress(`${quick ? "quick" : "full"} mode; scenarios: ${only.join(", ")}; work dir ${dir}`);
  server = await startBenchPostgres(dir);
  const machine = await describeMachine(server.version);
  progress(`PostgreSQL ${server.version} up; ${machine.cpu}, ${machine.cores} cores`);
  const context: BenchContext = { pg: server, dir, logDir, quick, sizes, nodeFlags, progress };
  const results: Results = {};
  const wanted = (name: Scenario) => only.includes(name);

  if (wanted("lateness")) {
    progress("lateness");
    results.lateness = await runLateness(context);
  }
  if (wanted("lateness-minute")) {
    progress("lateness at default settings, `* * * * *`");
    results.latenessMinute = await runMinuteLateness(context);
    results.latenessFloor = await runTimerFloor(
      context,
      context.sizes.latenessMinuteProcesses,
      context.sizes.latenessMinuteBoundaries,
    );
  }
  if (wanted("herd")) {
    progress("herd");
    results.herd = await runHerd(context);
  }
  if (wanted("herd-3")) {
    progress("herd shared by 3 processes");
    results.herdShared = await runHerdShared(context);
  }
  if (wanted("herd-memory")) {
    progress(
      `herd-memory: ${sizes.herdSharedTasks} tasks on one process, its RSS after the herd and once idle`,
    );
    results.herdMemory = await runHerdMemory(context);
  }

  if (sizes.idleConcurrent) {
    // quick mode: idle and failover together (failover is mostly waiting for a lock to expire)
    if (wanted("idle") || wanted("failover")) progress("idle load and memory, and failover, together");
    const [idle, failover] = await Promise.all([
      wanted("idle") ? runIdle(context) : undefined,
      wanted("failover") ? runFailover(context) : undefined,
    ]);
    if (idle) results.idle = idle;
    if (failover) results.failover = failover;
  } else {
    if (wanted("idle")) {
      progress("idle load and memory");
      results.idle = await runIdle(context);
    }
    if (wanted("failover")) {
      progress("failover");
      results.failover = await runFailover(context);
    }
  }
  if (wanted("partition")) results.partition = await runPartition(context);
  if (wanted("rolling")) {
    progress("rolling restart");
    results.rolling = await runRolling(context);
    progress("rolling restart, tuned: 50 runs at once per process");
    results.rollingTuned = await runRolling(context, 50);
  }
  if (wanted("reconcile")) {
    progress(`reconcile with ${sizes.reconcileTasks} tasks`);
    results.reconcile = await runReconcile(context, sizes.reconcileTasks);
    progress("reconcile with 10 tasks (config write -> stored, for contrast)");
    results.reconcileSmall = await runReconcile(context, 10);
  }
  if (wanted("search")) {
    progress(`run search over ${sizes.searchRows.toLocaleString("en")} run records`);
    results.search = await runSearch(context);
  }

  if (wanted("backfill")) {
    progress(
      `backfill of ${sizes.backfillSlots} slots at concurrency 10 on 3 processes, one SIGKILLed midway`,
    );
    results.backfill = await runBackfill(context);
  }
  if (wanted("pause-all")) {
    progress(`pause all with ${sizes.pauseTasks} tasks on 3 processes`);
    results.pauseAll = await runPauseAll(context);
  }
  if (wanted("scale")) {
    progress(`scale: ${sizes.scaleTasks} tasks on 3 instances`);
    results.scale = await runScale(context, sizes.scaleTasks, sizes.scaleEdits);
  }
  if (wanted("sharding")) {
    progress("sharding: 1,000 shards on 3 processes, a SIGKILL, one of 4 stopping, a map of 50,000 items");
    results.sharding = await runSharding(context);
  }
  if (wanted("isolation")) {
    progress("isolation: handler dispatch per mode, and the herd isolated");
    results.isolation = await runIsolation(context);
  }

  const report = markdown({
    results,
    machine,
    sizes,
    quick,
    nodeFlags,
    loadAfter: os.loadavg(),
    commitAfter: codeVersion(),
    elapsedS: (performance.now() - began) / 1000,
    startedAt,
  });
  process.stdout.write(`${report}\n${jsonLine(results, sizes, quick, machine.commit)}\n`);
}

try {
  await main();
  await cleanUp();
  progress("done");
  process.exit(0);
} catch (error) {
  // after an interruption, the scenario fails because its workers were killed: nothing to add
  if (!interrupted) progress(`failed: ${(error as Error).stack ?? String(error)}`);
  await cleanUp(true);
  process.exit(1);
}

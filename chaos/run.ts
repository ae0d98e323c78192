/**
 * `npm run chaos`: three cronwarden instances (OS processes) on one PostgreSQL, about 200 tasks
 * firing every 5-10 s, under random SIGKILLs, PostgreSQL restarts and config edits (hostile
 * documents included), decided by a seed; then a settle period, a graceful stop, and a check of
 * the database's record (chaos/lib/check.ts). Exit 0 when every invariant holds, 1 otherwise,
 * 2 when the harness itself failed. See docs/operations.md, "Chaos run".
 *
 *   npm run chaos -- [--duration=10m] [--quick] [--seed=N] [--tasks=200] [--keep]
 *   npm run chaos -- --recheck=<kept temp dir>     (the check again, on a kept run's record)
 */
import { mkdir, mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import pg from "pg";
import { sleep } from "../bench/lib/common.js";
import { createLogger } from "../src/core/logger.js";
import { type EmbeddedPostgres, startEmbeddedPostgres } from "../src/infra/embeddedPostgres/index.js";
import { checkRecord, type HandlerRun, type ProcessRecord } from "./lib/check.js";
import {
  editState,
  HOSTILE_KINDS,
  type HostileKind,
  initialState,
  renderHostile,
  renderValid,
  revisionOf,
  writeDocument,
} from "./lib/documents.js";
import { ChaosInstance } from "./lib/instanceProcess.js";
import { createRandom } from "./lib/random.js";
import { readAudit, readJournals, readLogRows, readShardJournals, readShardRecord } from "./lib/record.js";
import { checkShards } from "./lib/shardCheck.js";
import { type InstanceSpec, SHARDED_TASK } from "./lib/spec.js";

interface Options {
  durationMs: number;
  seed: number;
  taskCount: number;
  keep: boolean;
  quick: boolean;
  recheck: string | undefined;
}

function parseArgs(argv: string[]): Options {
  const options: Options = {
    durationMs: 10 * 60_000,
    seed: Math.floor(Math.random() * 2 ** 31),
    taskCount: 200,
    keep: false,
    quick: false,
    recheck: undefined,
  };
  for (const arg of argv) {
    const [name, value] = arg.split("=", 2);
    if (name === "--quick") {
      options.quick = true;
      options.durationMs = 60_000;
    } else if (name === "--keep") options.keep = true;
    else if (name === "--recheck" && value) options.recheck = value;
    else if (name === "--duration" && value) options.durationMs = parseDuration(value);
    else if (name === "--seed" && value && /^\d+$/.test(value)) options.seed = Number(value);
    else if (name === "--tasks" && value && /^\d+$/.test(value) && Number(value) > 0)
      options.taskCount = Number(value);
    else {
      throw new Error(
        `chaos: unknown or malformed argument ${JSON.stringify(arg)}; use --duration=10m|90s, --quick, --seed=<integer>, --tasks=<count>, --keep, --recheck=<kept dir>`,
      );
    }
  }
  return options;
}

function parseDuration(text: string): number {
  const match = /^(\d+(?:\.\d+)?)(ms|s|m|h)?$/.exec(text);
  if (!match) throw new Error(`chaos: --duration=${text} is not a duration; use e.g. 90s, 10m`);
  const factor = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 }[(match[2] ?? "s") as "ms" | "s" | "m" | "h"];
  return Number(match[1]) * factor;
}

/** The instances' settings: a lowered minimum interval (5 s crons) and a short lock lifetime. */
const SETTINGS = {
  minIntervalMs: 5_000,
  processEveryMs: 1_000,
  lockLifetimeMs: 6_000,
  maxConcurrency: 40,
  healthProbeMs: 1_000,
  drainTimeoutMs: 20_000,
  poolMax: 10,
  maxTaskMs: 3_000,
};
const INSTANCE_LABELS = ["i1", "i2", "i3"];
const READY_TIMEOUT_MS = 60_000;
const STOP_TIMEOUT_MS = SETTINGS.drainTimeoutMs + 15_000;

const iso = (ms: number) => new Date(ms).toISOString();
const out = (line: string) => process.stdout.write(`${line}\n`);
const elapsed = (began: number) => `${((Date.now() - began) / 1000).toFixed(1).padStart(6)} s`;

async function tail(file: string, lines = 15): Promise<string> {
  const text = await readFile(file, "utf8").catch(() => "");
  return text.trimEnd().split("\n").slice(-lines).join("\n");
}

/** The time and message of an instance's last log lines (pino JSON), to see where it stopped. */
async function lastMessages(file: string, lines = 15): Promise<string> {
  const text = await tail(file, lines);
  return text
    .split("\n")
    .map((line) => {
      try {
        const entry = JSON.parse(line) as { time?: number; level?: number; msg?: string };
        return `${entry.time ? iso(entry.time) : "?"} ${entry.level ?? "?"} ${entry.msg ?? ""}`;
      } catch {
        return line.slice(0, 300);
      }
    })
    .join("\n");
}

async function main(): Promise<number> {
  const options = parseArgs(process.argv.slice(2));
  if (options.recheck) return recheck(path.resolve(options.recheck));
  const random = createRandom(options.seed);
  const settleMs = options.quick ? 30_000 : 45_000;
  out(
    `chaos run: seed ${options.seed} (replay: npm run chaos -- --seed=${options.seed} ${options.quick ? "--quick" : `--duration=${options.durationMs / 1000}s`}${options.taskCount === 200 ? "" : ` --tasks=${options.taskCount}`}), ${options.durationMs / 1000} s of chaos + ${settleMs / 1000} s settle, ${INSTANCE_LABELS.length} instances, ${options.taskCount} tasks`,
  );
  const dir = await mkdtemp(path.join(tmpdir(), "cronwarden-chaos-"));
  const logDir = path.join(dir, "logs");
  const configFile = path.join(dir, "tasks.yaml");
  const dataDir = path.join(dir, "pg");
  const pgLogger = createLogger({ level: "warn", destination: process.stderr });
  let server: EmbeddedPostgres | undefined = await startEmbeddedPostgres({ dataDir, logger: pgLogger });
  const port = server.port;
  const databaseUrl = server.connectionString;
  const began = Date.now();
  const log = (message: string) => out(`${elapsed(began)}  ${message}`);
  const instances = new Map<string, ChaosInstance>();
  const allProcesses: ChaosInstance[] = [];
  const restartAt = new Map<string, number>();
  const pgDown: Array<{ from: number; to: number }> = [];
  const hostileRevisions = new Map<string, string>();
  const counts = { kills: 0, pgRestarts: 0, configEdits: 0, hostileDocs: 0, restarts: 0 };
  let generation = 0;

  await mkdir(logDir, { recursive: true });

  const launch = (label: string): ChaosInstance => {
    generation++;
    const spec: InstanceSpec = {
      label,
      databaseUrl,
      configFile,
      journalFile: path.join(logDir, `journal-${label}-${generation}.jsonl`),
      shardJournalFile: path.join(logDir, `shards-${label}-${generation}.jsonl`),
      logFile: path.join(logDir, `${label}-${generation}.log`),
      taskCount: options.taskCount,
      seed: options.seed,
      ...SETTINGS,
    };
    const instance = new ChaosInstance(
      label,
      spec,
      path.join(logDir, `${label}-${generation}.stderr.log`),
      (crashed) => {
        log(
          `CRASH: ${crashed.record.instance} exited on its own (code ${crashed.record.code}, signal ${crashed.record.signal})`,
        );
        restartAt.set(label, Date.now() + 2_000);
      },
      STOP_TIMEOUT_MS,
    );
    instances.set(label, instance);
    allProcesses.push(instance);
    return instance;
  };
  const startInstance = async (label: string) => {
    const instance = launch(label);
    try {
      await Promise.race([
        instance.ready,
        sleep(READY_TIMEOUT_MS).then(() => {
          throw new Error(`${instance.record.instance} not ready within ${READY_TIMEOUT_MS / 1000} s`);
        }),
      ]);
    } catch (error) {
      log(`${(error as Error).message}; see ${path.join(logDir, `${label}-${generation}.stderr.log`)}`);
    }
  };

  const state = initialState(options.taskCount, random);
  await writeDocument(configFile, renderValid(state));
  let exitCode = 2;
  // Ctrl-C or a CI timeout: no instance and no PostgreSQL left behind
  const interrupt = (signal: NodeJS.Signals) => {
    out(`${signal}: stopping the instances and PostgreSQL; logs kept in ${dir}`);
    for (const instance of instances.values()) if (instance.alive) instance.kill();
    void Promise.resolve(server?.stop()).finally(() => process.exit(130));
  };
  process.once("SIGINT", interrupt);
  process.once("SIGTERM", interrupt);
  try {
    await Promise.all(INSTANCE_LABELS.map((label) => startInstance(label)));
    if (![...instances.values()].every((instance) => instance.record.readyAt !== null))
      throw new Error("not every instance came up; nothing to test");
    const checkFrom = Date.now() + 1_000;
    log(
      `3 instances ready (${[...instances.values()].map((i) => i.record.instance).join(", ")}); chaos begins`,
    );

    // ---- chaos: one event at a time, each drawn from the seed
    const chaosEnd = Date.now() + options.durationMs;
    const restartDue = async () => {
      for (const [label, at] of [...restartAt]) {
        if (at > Date.now()) continue;
        restartAt.delete(label);
        counts.restarts++;
        await startInstance(label);
        log(`restarted ${label} as ${instances.get(label)?.record.instance}`);
      }
    };
    const waitUntil = async (deadline: number) => {
      while (Date.now() < deadline) {
        await restartDue();
        await sleep(Math.min(100, deadline - Date.now()));
      }
    };
    const plan: Array<"kill" | "pg" | "edit" | "hostile"> = [];
    const gaps: [number, number] = options.quick ? [1_000, 3_000] : [2_000, 6_000];
    const events = Math.max(6, Math.floor(options.durationMs / ((gaps[0] + gaps[1]) / 2)));
    for (let index = 0; index < events; index++) {
      const roll = random.next();
      plan.push(roll < 0.3 ? "kill" : roll < 0.4 ? "pg" : roll < 0.7 ? "edit" : "hostile");
    }
    // at least two kills, one PostgreSQL restart and two hostile documents in every run
    for (const [kind, minimum] of [
      ["kill", 2],
      ["pg", Math.max(1, Math.round(options.durationMs / 120_000))],
      ["hostile", 2],
    ] as const) {
      while (plan.filter((event) => event === kind).length < minimum)
        plan[random.int(0, plan.length - 1)] = kind;
    }
    for (const event of plan) {
      await waitUntil(Math.min(chaosEnd, Date.now() + random.int(gaps[0], gaps[1])));
      if (Date.now() >= chaosEnd) break;
      if (event === "kill") {
        const alive = [...instances.values()].filter(
          (instance) => instance.alive && instance.record.readyAt !== null,
        );
        if (alive.length === 0) continue;
        const victim = random.pick(alive);
        victim.kill();
        counts.kills++;
        restartAt.set(victim.record.label, Date.now() + random.int(1_000, 8_000));
        log(`SIGKILL ${victim.record.instance} (${alive.length - 1} left alive)`);
      } else if (event === "pg") {
        const downMs = random.int(1_000, 4_000);
        const from = Date.now();
        await server?.stop();
        server = undefined;
        await sleep(downMs);
        server = await startEmbeddedPostgres({ dataDir, port, logger: pgLogger });
        pgDown.push({ from, to: Date.now() });
        counts.pgRestarts++;
        log(`PostgreSQL restarted (down ${((Date.now() - from) / 1000).toFixed(1)} s)`);
      } else if (event === "edit") {
        const what = editState(state, random);
        await writeDocument(configFile, renderValid(state));
        counts.configEdits++;
        log(`config edit: ${what}`);
      } else {
        const kind: HostileKind = random.pick(HOSTILE_KINDS);
        const content = renderHostile(kind, state, random);
        hostileRevisions.set(revisionOf(content), kind);
        await writeDocument(configFile, content);
        counts.hostileDocs++;
        const keptMs = random.int(1_000, 3_000);
        log(`hostile document: ${kind} (${content.length} bytes), restored after ${keptMs} ms`);
        await waitUntil(Date.now() + keptMs);
        await writeDocument(configFile, renderValid(state));
      }
    }
    await waitUntil(chaosEnd);

    // ---- settle: everything back up, then a catch-up period
    const settleStart = Date.now();
    for (const label of INSTANCE_LABELS) {
      if (!instances.get(label)?.alive) restartAt.set(label, 0);
    }
    await restartDue();
    log(`chaos over; settling for ${settleMs / 1000} s`);
    await waitUntil(settleStart + settleMs);
    // slots due later than this may still be waiting for their run at the stop
    const checkUntil = settleStart + settleMs - 15_000;
    log("stopping the instances (SIGTERM)");
    await Promise.all([...instances.values()].map((instance) => instance.stop()));

    // ---- the record
    const passed = await verify({
      dir,
      logDir,
      databaseUrl,
      seed: options.seed,
      durationMs: options.durationMs,
      taskCount: options.taskCount,
      processes: allProcesses.map((instance) => instance.record),
      pgDown,
      hostileRevisions,
      checkFrom,
      checkUntil,
      counts,
    });
    exitCode = passed ? 0 : 1;
    out(
      exitCode === 0
        ? "chaos run passed"
        : `chaos run FAILED (seed ${options.seed}); logs and journals in ${dir}`,
    );
  } finally {
    for (const instance of instances.values()) if (instance.alive) instance.kill();
    await Promise.all([...instances.values()].map((instance) => instance.exited));
    await server?.stop();
    if (exitCode === 0 && !options.keep) await rm(dir, { recursive: true, force: true });
    else out(`kept ${dir}`);
  }
  return exitCode;
}

interface RunRecord {
  dir: string;
  logDir: string;
  databaseUrl: string;
  seed: number;
  durationMs: number;
  taskCount: number;
  processes: ProcessRecord[];
  pgDown: Array<{ from: number; to: number }>;
  hostileRevisions: Map<string, string>;
  checkFrom: number;
  checkUntil: number;
  counts: Record<string, number>;
}

/** What chaos-run.json keeps of a run, enough to check its record again (`--recheck=<dir>`). */
interface SavedRun extends Omit<RunRecord, "dir" | "logDir" | "databaseUrl" | "hostileRevisions"> {
  window: { from: string; until: string };
  hostileDocuments: Record<string, string>;
}

/** Reads the record (database and journals), checks it, prints the verdict; true when every invariant holds. */
async function verify(run: RunRecord): Promise<boolean> {
  const client = new pg.Client({ connectionString: run.databaseUrl });
  client.on("error", () => {});
  await client.connect();
  let verdictInput: Parameters<typeof checkRecord>[0];
  let shardInput: Parameters<typeof checkShards>[0];
  try {
    const handlerRuns = await importJournals(client, run.logDir);
    const logRows = await readLogRows(client);
    const audit = await readAudit(client);
    let unhandledRejections = 0;
    for (const file of await readdir(run.logDir)) {
      if (!file.endsWith(".log") || file.endsWith(".stderr.log")) continue;
      const text = await readFile(path.join(run.logDir, file), "utf8");
      unhandledRejections += text
        .split("\n")
        .filter((line) => line.includes("unhandled promise rejection")).length;
    }
    verdictInput = {
      handlerRuns,
      logRows,
      audit,
      processes: run.processes,
      pgDown: run.pgDown,
      hostileRevisions: run.hostileRevisions,
      checkFrom: run.checkFrom,
      checkUntil: run.checkUntil,
      changeToleranceMs: SETTINGS.processEveryMs + 1_000,
      takeoverWindowMs: 2 * SETTINGS.lockLifetimeMs + 2 * SETTINGS.processEveryMs,
      unhandledRejections,
      shardedTasks: [SHARDED_TASK],
    };
    shardInput = {
      ...(await readShardRecord(client)),
      executions: await readShardJournals(run.logDir),
      logRows,
      processes: run.processes,
      pgDown: run.pgDown,
      tasks: [SHARDED_TASK],
    };
  } finally {
    await client.end();
  }
  for (const record of run.processes) {
    if (record.end === "crashed" || record.end === "hung") {
      const logFile = (record.stderrFile ?? "").replace(/\.stderr\.log$/, ".log");
      out(
        `--- ${record.instance} ${record.end}; last lines of ${record.stderrFile}:\n${await tail(record.stderrFile ?? "")}`,
      );
      out(`--- its last log messages (${logFile}):\n${await lastMessages(logFile)}`);
    }
  }
  const records = checkRecord(verdictInput);
  const shards = checkShards(shardInput);
  const verdict = {
    violations: [...records.violations, ...shards.violations],
    notes: [...records.notes, ...shards.notes],
  };
  const figures = { ...records.figures, ...shards.figures, ...run.counts };
  // what the orchestrator saw, beside the logs and journals, for whoever digs into a failed run
  const saved: SavedRun = {
    seed: run.seed,
    durationMs: run.durationMs,
    taskCount: run.taskCount,
    checkFrom: run.checkFrom,
    checkUntil: run.checkUntil,
    window: { from: iso(run.checkFrom), until: iso(run.checkUntil) },
    processes: run.processes,
    pgDown: run.pgDown,
    hostileDocuments: Object.fromEntries(run.hostileRevisions),
    counts: run.counts,
  };
  await writeFile(
    path.join(run.dir, "chaos-run.json"),
    JSON.stringify(
      {
        ...saved,
        figures,
        violations: verdict.violations,
        notes: verdict.notes,
      },
      null,
      2,
    ),
  );
  printTable(figures);
  for (const note of verdict.notes) {
    out(`note: ${note.what}: ${note.count}`);
    for (const example of note.examples) out(`  - ${example}`);
  }
  for (const violation of verdict.violations) {
    out(`FAIL ${violation.invariant}: ${violation.count}`);
    for (const example of violation.examples) out(`  - ${example}`);
  }
  out(
    `CHAOS_RESULT ${JSON.stringify({
      seed: run.seed,
      durationMs: run.durationMs,
      tasks: run.taskCount,
      passed: verdict.violations.length === 0,
      figures,
      violations: verdict.violations.map(({ invariant, count }) => ({ invariant, count })),
    })}`,
  );
  return verdict.violations.length === 0;
}

/** `--recheck=<dir>`: the check again on a kept run (its PostgreSQL data, journals and chaos-run.json). */
async function recheck(dir: string): Promise<number> {
  const saved = JSON.parse(await readFile(path.join(dir, "chaos-run.json"), "utf8")) as SavedRun & {
    figures?: Record<string, number>;
  };
  // runs saved before chaos-run.json held times as numbers: ISO strings, counts among the figures
  const time = (value: number | string) => (typeof value === "string" ? Date.parse(value) : value);
  saved.checkFrom ??= Date.parse(saved.window.from);
  saved.checkUntil ??= Date.parse(saved.window.until);
  saved.pgDown = saved.pgDown.map((down) => ({ from: time(down.from), to: time(down.to) }));
  saved.counts ??= Object.fromEntries(
    ["kills", "restarts", "pgRestarts", "configEdits", "hostileDocs"].map((name) => [
      name,
      saved.figures?.[name] ?? 0,
    ]),
  );
  const server = await startEmbeddedPostgres({
    dataDir: path.join(dir, "pg"),
    logger: createLogger({ level: "warn", destination: process.stderr }),
  });
  try {
    out(`re-checking the chaos run in ${dir} (seed ${saved.seed})`);
    const passed = await verify({
      ...saved,
      dir,
      logDir: path.join(dir, "logs"),
      databaseUrl: server.connectionString,
      hostileRevisions: new Map(Object.entries(saved.hostileDocuments)),
    });
    return passed ? 0 : 1;
  } finally {
    await server.stop();
  }
}

/** Loads every instance's journal into `chaos_handler_runs` (one row per handler execution) and returns the rows. */
async function importJournals(client: pg.Client, logDir: string): Promise<HandlerRun[]> {
  const all = await readJournals(logDir);
  await client.query(`DROP TABLE IF EXISTS chaos_handler_runs`);
  await client.query(`CREATE TABLE chaos_handler_runs (
      task TEXT NOT NULL, slot TIMESTAMPTZ NOT NULL, instance TEXT NOT NULL, pid INTEGER NOT NULL,
      attempt INTEGER NOT NULL, started_at TIMESTAMPTZ NOT NULL, finished_at TIMESTAMPTZ,
      error TEXT, rerun_of TIMESTAMPTZ, rerun_of_unknown BOOLEAN NOT NULL)`);
  for (let start = 0; start < all.length; start += 1000) {
    const batch = all.slice(start, start + 1000);
    const values: unknown[] = [];
    const rows = batch.map((run, index) => {
      values.push(
        run.task,
        new Date(run.slot),
        run.instance,
        run.pid,
        run.attempt,
        new Date(run.startedAt),
        run.finishedAt === null ? null : new Date(run.finishedAt),
        run.error,
        run.rerunOf === null || Number.isNaN(run.rerunOf) ? null : new Date(run.rerunOf),
        run.rerunOf !== null && Number.isNaN(run.rerunOf),
      );
      return `(${Array.from({ length: 10 }, (_, offset) => `$${index * 10 + offset + 1}`).join(", ")})`;
    });
    await client.query(
      `INSERT INTO chaos_handler_runs (task, slot, instance, pid, attempt, started_at, finished_at, error, rerun_of, rerun_of_unknown) VALUES ${rows.join(", ")}`,
      values,
    );
  }
  return all;
}

const FIGURE_ROWS: Array<[string, string]> = [
  ["slotsDue", "slots due (task enabled)"],
  ["succeeded", "  succeeded"],
  ["skipped", "  skipped (recorded)"],
  ["interrupted", "  interrupted (handler started, did not succeed)"],
  ["caughtUp", "  covered by the catch-up policy"],
  ["caughtUpDeadWindow", "    of which no instance alive or DB down"],
  ["superseded", "  superseded by a config change"],
  ["lost", "  lost"],
  ["runs", "handler runs (slots in the checked window)"],
  ["reruns", "  re-runs (rerunOf)"],
  ["lateStartP99Ms", "start lateness p99 (ms)"],
  ["duplicates", "duplicates"],
  ["phantomFailures", "phantom failures"],
  ["mislabelledStarts", "mislabelled start rows"],
  ["killedNotRerun", "killed runs not re-run"],
  ["unfinishedAtStop", "handlers unfinished at stop"],
  ["crashes", "crashes"],
  ["unhandledRejections", "unhandled rejections"],
  ["shardedSlotsEnded", "sharded slots ended (chaos-sharded, 30 shards, a reduce)"],
  ["shardedSlotsOpen", "  still open at the stop"],
  ["shardsChecked", "  their shards"],
  ["shardsFailed", "    failed (accounted for)"],
  ["shardsReclaimed", "    claimed again (holder dead, lease lapsed, given back)"],
  ["shardReturnsRepeated", "    returned twice after a kill or an outage"],
  ["reduceRepeated", "  reduces started twice (holder died during it)"],
  ["kills", "SIGKILLs"],
  ["restarts", "instance restarts"],
  ["pgRestarts", "PostgreSQL restarts"],
  ["configEdits", "config edits"],
  ["hostileDocs", "hostile documents"],
  ["hostileApplied", "  of which applied"],
];

function printTable(figures: Record<string, number | null>): void {
  out("");
  out("| figure | value |");
  out("|---|---:|");
  for (const [name, label] of FIGURE_ROWS) out(`| ${label} | ${figures[name] ?? "-"} |`);
  out("");
}

main().then(
  (code) => process.exit(code),
  (error: unknown) => {
    process.stderr.write(`chaos run failed: ${(error as Error).stack ?? String(error)}\n`);
    process.exit(2);
  },
);

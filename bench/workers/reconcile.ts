/**
 * cronwarden's reconcile, timed through the public Scheduler with a real config file:
 * 1. cold: `count` enabled tasks on an empty database (the first reconcile creates every job);
 * 2. change: every cron changed in the file;
 * 3. no-op: the same tasks in a file with a new revision (nothing to change);
 * 4. edits: one entry's cron changed, from the file write (atomic rename) until PostgreSQL holds
 *    the row's new cron and next run, with the FileConfigSource's default debounce.
 * Each reconcile is timed from the `config:loaded` event (the file was read and validated) to the
 * `reconciled` event (plan applied, audit rows and the applied snapshot written), or to
 * `reconcile:failed` when it fails (the figure then says so). A cold start that fails is followed
 * by a second start on the same database, as a supervisor would restart the process.
 * Anti-entropy is off here so that no periodic pass queues behind the timed ones.
 */
import { createWriteStream } from "node:fs";
import { rename, writeFile } from "node:fs/promises";
import path from "node:path";
import { monitorEventLoopDelay } from "node:perf_hooks";
import { setTimeout as sleep } from "node:timers/promises";
import pg from "pg";
import { parseDesiredState } from "../../src/config/desiredState.js";
import { createLogger, createScheduler, FileConfigSource, type Scheduler } from "../../src/index.js";
import { exitWithParent, type ReconcileSpec, readSpec, send, taskName } from "../lib/protocol.js";

exitWithParent();
const spec = readSpec<ReconcileSpec>();
const label = "cronwarden-reconcile";
const pid = process.pid;
const configFile = path.join(spec.workDir, "tasks.json");
const names = Array.from({ length: spec.count }, (_, index) => taskName("r", index));
/** Daily at minute `k` of the hour twelve hours from now: never due while the bench runs. */
const farHour = (new Date().getUTCHours() + 12) % 24;
const cronFor = (k: number) => `${k % 60} ${farHour} * * *`;

function documentOf(cronOf: (name: string) => string, comment = "") {
  return { comment, tasks: names.map((name) => ({ name, enabled: true, cron: cronOf(name) })) };
}

/** Writes the config atomically (temp file + rename); returns when the rename happened. */
async function writeConfig(cronOf: (name: string) => string, comment = ""): Promise<number> {
  const temporary = `${configFile}.tmp`;
  await writeFile(temporary, JSON.stringify(documentOf(cronOf, comment)));
  const at = performance.now();
  await rename(temporary, configFile);
  return at;
}

interface Outcome {
  loadedAt: number;
  doneAt: number;
  applied: number;
  error: string | null;
}

const logger = createLogger({
  level: "info",
  destination: createWriteStream(path.join(spec.workDir, "cronwarden.log"), { flags: "a" }),
});
const pools: pg.Pool[] = [];
let loadedAt = 0;
let waiting: ((outcome: Omit<Outcome, "loadedAt">) => void) | undefined;

function newScheduler(): Scheduler {
  const pool = new pg.Pool({ connectionString: spec.databaseUrl, max: spec.poolMax });
  pool.on("error", () => {});
  pools.push(pool);
  const scheduler = createScheduler({
    pool,
    config: new FileConfigSource({ path: configFile }),
    logger,
    instanceId: `${label}:${pid}:${pools.length}`,
    antiEntropyMs: 0,
  });
  for (const name of names) scheduler.register({ name, handler: async () => {} });
  scheduler.on("config:loaded", () => {
    loadedAt = performance.now();
  });
  scheduler.on("reconciled", (result) =>
    waiting?.({ doneAt: performance.now(), applied: result.applied.length, error: null }),
  );
  scheduler.on("reconcile:failed", ({ error }) =>
    waiting?.({ doneAt: performance.now(), applied: Number.NaN, error: firstLine(error.message) }),
  );
  return scheduler;
}

function firstLine(text: string): string {
  return (text.split("\n")[0] ?? "").slice(0, 200);
}

/** The next reconcile's outcome (success or failure), with the time its config was loaded. */
function nextOutcome(timeoutMs: number): Promise<Outcome> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      waiting = undefined;
      reject(new Error(`no reconcile within ${timeoutMs} ms`));
    }, timeoutMs);
    waiting = (outcome) => {
      clearTimeout(timer);
      waiting = undefined;
      resolve({ ...outcome, loadedAt });
    };
  });
}

const loopDelay = monitorEventLoopDelay({ resolution: 10 });
loopDelay.enable();
const timeoutMs = 60_000 + spec.count * 50;

try {
  // what every config load costs before the reconcile: parse and validate every entry
  const validateBegan = performance.now();
  parseDesiredState(
    documentOf(() => cronFor(0)),
    {
      defaultTimezone: "UTC",
      rules: { minIntervalMs: 60_000 },
      now: new Date(),
      source: "bench",
      revision: "bench",
    },
  );
  const validateMs = performance.now() - validateBegan;

  // 1. cold
  await writeConfig(() => cronFor(0));
  let scheduler = newScheduler();
  const cold = nextOutcome(timeoutMs);
  const startBegan = performance.now();
  let startError: string | null = null;
  let restartMs: number | null = null;
  try {
    await scheduler.start();
  } catch (error) {
    startError = firstLine((error as Error).message);
  }
  const startMs = performance.now() - startBegan;
  const coldOutcome = await cold;
  if (startError) {
    // the process would exit here; a supervisor starts it again on the same database
    scheduler = newScheduler();
    const again = performance.now();
    const restarted = nextOutcome(timeoutMs);
    await scheduler.start();
    await restarted;
    restartMs = performance.now() - again;
  }
  const jobs = await scheduler.jobs();
  await sleep(2_000);

  // 2. every cron changed
  const change = nextOutcome(timeoutMs);
  loopDelay.reset();
  const changeWrittenAt = await writeConfig(() => cronFor(1));
  const changeOutcome = await change;
  const changeBlockedMs = loopDelay.max / 1e6;
  const changeStored = await scheduler.jobs();
  let changeRetryApplied: number | null = null;
  if (changeOutcome.error) {
    // the watcher applies the same snapshot again after 5 s
    const retry = await nextOutcome(30_000);
    changeRetryApplied = retry.error ? Number.NaN : retry.applied;
  }
  await sleep(2_000);

  // 3. no change, new revision
  const noop = nextOutcome(timeoutMs);
  await writeConfig(() => cronFor(1), "same tasks, new revision");
  const noopOutcome = await noop;
  await sleep(2_000);

  // 4. one entry edited, until PostgreSQL holds it
  const probe = new pg.Client({ connectionString: spec.databaseUrl });
  await probe.connect();
  const configToStoredMs: number[] = [];
  const edited = names[0] ?? taskName("r", 0);
  for (let edit = 0; edit < spec.edits; edit++) {
    const cron = cronFor(2 + edit);
    const applied = nextOutcome(timeoutMs);
    const writtenAt = await writeConfig((name) => (name === edited ? cron : cronFor(1)));
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const row = await probe.query<{ repeat_interval: string; next_run_at: Date | null }>(
        "SELECT repeat_interval, next_run_at FROM agenda_jobs WHERE name = $1",
        [edited],
      );
      if (row.rows[0]?.repeat_interval === cron && row.rows[0].next_run_at) break;
      if (Date.now() > deadline) throw new Error(`edit ${edit}: "${edited}" not re-timed to "${cron}"`);
      await sleep(2);
    }
    configToStoredMs.push(performance.now() - writtenAt);
    await applied;
    await sleep(1_000);
  }
  await probe.end();

  const auditRows = await pools[pools.length - 1]?.query<{ rows: string }>(
    "SELECT count(*)::text AS rows FROM cronwarden_audit",
  );

  send({
    type: "reconcile",
    figures: {
      count: spec.count,
      validateMs,
      startMs,
      startError,
      restartMs,
      jobsAfterStart: jobs.length,
      coldMs: coldOutcome.doneAt - coldOutcome.loadedAt,
      coldChanges: coldOutcome.applied,
      coldError: coldOutcome.error,
      changeMs: changeOutcome.doneAt - changeOutcome.loadedAt,
      changeFromWriteMs: changeOutcome.doneAt - changeWrittenAt,
      changeLoadMs: changeOutcome.loadedAt - changeWrittenAt,
      changeBlockedMs,
      changeChanges: changeOutcome.applied,
      changeError: changeOutcome.error,
      changeStored: changeStored.filter((job) => job.cron === cronFor(1)).length,
      changeRetryApplied,
      noopMs: noopOutcome.doneAt - noopOutcome.loadedAt,
      noopChanges: noopOutcome.applied,
      configToStoredMs,
      auditRows: Number(auditRows?.rows[0]?.rows ?? Number.NaN),
    },
  });
  await scheduler.stop({ drainTimeoutMs: 2_000 });
  for (const pool of pools) await pool.end().catch(() => {});
  send({ type: "stopped", label, pid });
  process.exit(0);
} catch (error) {
  send({ type: "fatal", label, pid, message: (error as Error).stack ?? String(error) });
  process.exit(1);
}

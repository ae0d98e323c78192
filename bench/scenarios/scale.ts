/**
 * Scale (cronwarden only): `count` tasks (100,000 in full mode) on 3 instances, OS processes under
 * plain node at their defaults, one database, one config file they all watch (bench/workers/scale.ts).
 * 1. cold: the first instance starts alone on an empty database; its first reconcile, from
 *    `config:loaded` to `reconciled` (by its own clock). Then the other two start.
 * 2. idle: after a settle, transactions per second on the database over a window
 *    (pg_stat_database), divided by the 3 instances; then each instance's VmRSS.
 * 3. no-op: the same tasks in a file with a new revision; each instance's reconcile, loaded -> done.
 * 4. edits: one entry's cron changed, from the file's rename until a separate connection reads the
 *    row's new cron and next run (median of `edits`); each edit waits for every instance's reconcile.
 * Tasks are daily, twelve hours away: none is due while it runs.
 */
import { mkdir, rename, writeFile } from "node:fs/promises";
import path from "node:path";
import pg from "pg";
import { Worker } from "../lib/children.js";
import { type BenchContext, farDailyCron, POOL_MAX, sleep } from "../lib/common.js";
import { preparePlainNode } from "../lib/plainNode.js";
import { type ScaleSpec, taskName } from "../lib/protocol.js";

const INSTANCES = 3;
const SETTLE_MS = 15_000;

export interface ScaleFigures {
  tasks: number;
  instances: number;
  coldMs: number;
  coldApplied: number | null;
  /** Each instance's scheduler.start(), in order of start. */
  startMs: number[];
  idleTpsPerInstance: number;
  idleWindowS: number;
  /** VmRSS of each instance after the idle window, and at the end (after the no-op and the edits). */
  rssMbIdle: number[];
  rssMbEnd: number[];
  /** Each instance's reconcile of the same tasks under a new revision, loaded -> done. */
  noopMs: number[];
  /** One entry edited: file rename -> the row's new cron and next run stored, each edit. */
  editToStoredMs: number[];
  /** Each edit: the slowest instance's reconcile of it, loaded -> done. */
  editReconcileMs: number[];
}

type ScaleMessage = Extract<Worker["messages"][number], { type: "scale" }>;

export async function runScale(context: BenchContext, count: number, edits: number): Promise<ScaleFigures> {
  const database = `bench_scale_${count}`;
  const workDir = path.join(context.dir, database);
  await mkdir(workDir, { recursive: true });
  const databaseUrl = await context.pg.createDatabase(database);
  const plain = await preparePlainNode(context.dir, context.progress);
  const configFile = path.join(workDir, "tasks.json");
  const names = Array.from({ length: count }, (_, index) => taskName("s", index));
  // the hour is fixed once: a run that crosses an hour must not change every cron
  const hour = Number(farDailyCron(0).split(" ")[1]);
  const cron = (k: number) => `${k % 60} ${hour} * * *`;
  const write = async (cronOf: (name: string, index: number) => string, comment: string) => {
    const document = {
      comment,
      tasks: names.map((name, index) => ({ name, enabled: true, cron: cronOf(name, index) })),
    };
    await writeFile(`${configFile}.tmp`, JSON.stringify(document));
    const at = Date.now();
    await rename(`${configFile}.tmp`, configFile);
    return at;
  };
  const workers: Worker[] = [];
  const spawn = (index: number) => {
    const label = `scale-${count}-${index + 1}`;
    const spec: ScaleSpec = {
      label,
      databaseUrl,
      configFile,
      names: { prefix: "s", count },
      poolMax: POOL_MAX,
      logFile: path.join(context.logDir, `${label}.log`),
      cronwardenEntry: plain.cronwardenEntry,
    };
    const worker = new Worker({
      label,
      worker: "scale",
      spec,
      logDir: context.logDir,
      plainNodeDir: plain.dir,
      nodeFlags: context.nodeFlags,
    });
    workers.push(worker);
    return worker;
  };
  const events = (worker: Worker) =>
    worker.messages.filter((message): message is ScaleMessage => message.type === "scale");
  /** The reconcile of `revision` by `worker`: loaded -> done (ms), or throws on a failure. */
  const reconcileOf = async (worker: Worker, revision: () => string | undefined, timeoutMs: number) => {
    let done: ScaleMessage | undefined;
    await worker.waitUntil(
      "a reconcile",
      () => {
        const wanted = revision();
        done = events(worker).find(
          (event) => event.revision === wanted && event.kind !== "loaded" && event.trigger === "config",
        );
        return done !== undefined;
      },
      timeoutMs,
    );
    const finished = done as ScaleMessage;
    if (finished.kind === "failed") throw new Error(`${worker.label}: reconcile failed: ${finished.message}`);
    const loaded = events(worker).find(
      (event) => event.kind === "loaded" && event.revision === finished.revision,
    );
    return { ms: finished.at - (loaded?.at ?? Number.NaN), applied: finished.applied };
  };
  const lastRevision = (worker: Worker, after: number) =>
    events(worker).find((event) => event.kind === "loaded" && event.at >= after)?.revision;
  const timeoutMs = 120_000 + count * 2;
  try {
    // 1. cold, one instance alone
    const coldWrittenAt = await write((_, index) => cron(index), "cold");
    const first = spawn(0);
    const cold = await reconcileOf(first, () => lastRevision(first, coldWrittenAt), timeoutMs);
    const readies = [await first.ready(timeoutMs)];
    context.progress(`scale ${count}: cold reconcile ${cold.ms} ms (${cold.applied} changes)`);
    const others = [spawn(1), spawn(2)];
    readies.push(...(await Promise.all(others.map((worker) => worker.ready(timeoutMs)))));

    // 2. idle load and memory
    await sleep(SETTLE_MS);
    const windowMs = context.sizes.idleWindowMs;
    const before = await context.pg.transactions(database);
    await sleep(windowMs);
    const after = await context.pg.transactions(database);
    const idleTpsPerInstance = (after - before) / (windowMs / 1000) / INSTANCES;
    const rssMbIdle = await Promise.all(workers.map(async (worker) => (await worker.rssBytes()) / 1_048_576));
    context.progress(
      `scale ${count}: idle ${idleTpsPerInstance.toFixed(2)} tps per instance; RSS ${rssMbIdle.map((mb) => mb.toFixed(0)).join(" / ")} MB`,
    );

    // 3. no-op: the same tasks, a new revision
    const noopWrittenAt = await write((_, index) => cron(index), "same tasks, new revision");
    const noop = await Promise.all(
      workers.map((worker) => reconcileOf(worker, () => lastRevision(worker, noopWrittenAt), timeoutMs)),
    );
    await sleep(2_000);

    // 4. one entry edited at a time
    const probe = new pg.Client({ connectionString: databaseUrl });
    await probe.connect();
    const editToStoredMs: number[] = [];
    const editReconcileMs: number[] = [];
    try {
      for (let edit = 0; edit < edits; edit++) {
        const edited = names[(edit * 7919) % count] as string;
        const newCron = `${59 - edit} ${(hour + 1) % 24} * * *`;
        const writtenAt = await write(
          (name, index) => (name === edited ? newCron : cron(index)),
          `edit ${edit}`,
        );
        for (;;) {
          const rows = await probe.query<{ repeat_interval: string; next_run_at: Date | null }>(
            "SELECT repeat_interval, next_run_at FROM agenda_jobs WHERE name = $1",
            [edited],
          );
          if (rows.rows[0]?.repeat_interval === newCron && rows.rows[0].next_run_at) break;
          if (Date.now() - writtenAt > timeoutMs) throw new Error(`edit ${edit}: "${edited}" never stored`);
          await sleep(2);
        }
        editToStoredMs.push(Date.now() - writtenAt);
        const reconciles = await Promise.all(
          workers.map((worker) => reconcileOf(worker, () => lastRevision(worker, writtenAt), timeoutMs)),
        );
        editReconcileMs.push(Math.max(...reconciles.map((each) => each.ms)));
        await sleep(1_000);
      }
    } finally {
      await probe.end().catch(() => {});
    }
    const rssMbEnd = await Promise.all(workers.map(async (worker) => (await worker.rssBytes()) / 1_048_576));
    return {
      tasks: count,
      instances: INSTANCES,
      coldMs: cold.ms,
      coldApplied: cold.applied,
      startMs: readies.map((ready) => ready.setupMs),
      idleTpsPerInstance: Math.round(idleTpsPerInstance * 100) / 100,
      idleWindowS: windowMs / 1000,
      rssMbIdle: rssMbIdle.map((mb) => Math.round(mb * 10) / 10),
      rssMbEnd: rssMbEnd.map((mb) => Math.round(mb * 10) / 10),
      noopMs: noop.map((each) => each.ms),
      editToStoredMs,
      editReconcileMs,
    };
  } finally {
    await Promise.all(workers.map((worker) => worker.stop(10_000)));
    await context.pg.dropDatabase(database).catch(() => {});
  }
}

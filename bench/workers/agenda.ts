/**
 * One raw Agenda 6 instance for the bench, as its documentation shows it:
 * `new Agenda({ backend: new PostgresBackend({ pool }) })`, `agenda.define` + `agenda.every`,
 * with the same poll interval and lock lifetime as the cronwarden contender; everything else at
 * Agenda's defaults. Reports every handler start.
 *
 * The only addition is an observer on the repository's `getNextJobToRun`: it remembers the
 * `next_run_at` of each row Agenda locks, so a start can be compared with its slot (Agenda
 * overwrites `nextRunAt` before the handler runs). It changes nothing Agenda does.
 */
import { setTimeout as sleep } from "node:timers/promises";
import { PostgresBackend } from "@agendajs/postgres-backend";
import { Agenda, type Job } from "agenda";
import pg from "pg";
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

const pool = new pg.Pool({ connectionString: spec.databaseUrl, max: spec.poolMax });
pool.on("error", () => {});
const backend = new PostgresBackend({ pool });

const slots = new Map<string, number | null>();
const repository = backend.repository;
const getNextJobToRun = repository.getNextJobToRun.bind(repository);
repository.getNextJobToRun = async (...args) => {
  const job = await getNextJobToRun(...args);
  if (job?._id) slots.set(String(job._id), job.nextRunAt ? new Date(job.nextRunAt).getTime() : null);
  return job;
};

const agenda = new Agenda({
  backend,
  processEvery: spec.processEveryMs,
  defaultLockLifetime: spec.lockLifetimeMs,
});
// Agenda reports a run it gave up on ("execution ... took more than <lock lifetime>") here, not as `fail`
agenda.on("error", (error: Error) => {
  process.stderr.write(`agenda error: ${error.message}\n`);
  send({ type: "engine-error", label, pid, at: Date.now(), message: error.message });
});

const names: string[] = [];
for (let index = 0; index < spec.tasks.count; index++) {
  const name = taskName(spec.tasks.prefix, index);
  names.push(name);
  agenda.define(name, async (job: Job) => {
    const at = Date.now();
    send({
      type: "start",
      label,
      pid,
      task: job.attrs.name,
      slot: slots.get(String(job.attrs._id)) ?? null,
      at,
      rerun: false,
    });
    if (spec.taskMs > 0) await sleep(spec.taskMs);
  });
}
agenda.on("success", (job: Job) =>
  send({ type: "finish", label, pid, task: job.attrs.name, at: Date.now(), error: null }),
);
agenda.on("fail", (error: Error, job: Job) =>
  send({ type: "finish", label, pid, task: job.attrs.name, at: Date.now(), error: error.message }),
);

process.on("message", (message: ParentMessage) => {
  if (message.type !== "stop") return;
  void (async () => {
    await agenda.drain({ timeout: 2_000, closeConnection: false }).catch(() => undefined);
    await pool.end().catch(() => undefined);
    send({ type: "stopped", label, pid });
    process.exit(0);
  })();
});

try {
  await agenda.start();
  await agenda.every(spec.tasks.cron, names, undefined, { timezone: "UTC" });
  send({ type: "ready", label, pid, at: Date.now(), setupMs: Date.now() - began });
} catch (error) {
  send({ type: "fatal", label, pid, message: (error as Error).stack ?? String(error) });
  process.exit(1);
}

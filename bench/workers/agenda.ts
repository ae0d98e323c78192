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
import { contenderWorker } from "../lib/contenderWorker.js";
import { taskName } from "../lib/protocol.js";

const worker = contenderWorker();
const { spec } = worker;

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
  worker.engineError(error.message);
});

const names: string[] = [];
for (let index = 0; index < spec.tasks.count; index++) {
  const name = taskName(spec.tasks.prefix, index);
  names.push(name);
  agenda.define(name, async (job: Job) => {
    worker.started(job.attrs.name, slots.get(String(job.attrs._id)) ?? null, false);
    if (spec.taskMs > 0) await sleep(spec.taskMs);
  });
}
agenda.on("success", (job: Job) => worker.finished(job.attrs.name, null));
agenda.on("fail", (error: Error, job: Job) => worker.finished(job.attrs.name, error.message));

await worker.run({
  start: async () => {
    await agenda.start();
    await agenda.every(spec.tasks.cron, names, undefined, { timezone: "UTC" });
  },
  stop: async () => {
    await agenda.drain({ timeout: 2_000, closeConnection: false }).catch(() => undefined);
    await pool.end();
  },
});

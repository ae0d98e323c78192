import { PostgresJobLogger, PostgresNotificationChannel } from "@agendajs/postgres-backend";
import { Agenda, type AgendaBackend, type Job } from "agenda";
import type { Pool } from "pg";
import type { Logger } from "../scheduler/logger.js";
import type { LiveJob } from "../scheduler/reconcilePlan.js";
import { DatabaseHealth } from "./databaseHealth.js";
import { CronwardenJobRepository } from "./jobRepository.js";
import { RunLedger } from "./runLedger.js";
import { RunRecorder } from "./runRecorder.js";
import { superviseRun } from "./runSupervisor.js";
import { ensureAgendaSchema } from "./schema.js";
import * as sql from "./sql.js";
import { Watchdog } from "./watchdog.js";

/**
 * The only module that knows Agenda. It owns the Agenda instance on a `pg` Pool it is given
 * (and does not close), defines one Agenda job per task, and offers the scheduler a narrow
 * surface: define, start, drain, read the job rows, and change them in place.
 */

export interface EngineOptions {
  pool: Pool;
  instanceId: string;
  processEveryMs: number;
  lockLifetimeMs: number;
  /** After a timeout, how long a handler that ignores its signal keeps the lock before it is abandoned. */
  timeoutGraceMs?: number;
  /** How often the database is probed for the outage log. */
  healthProbeMs?: number;
  logger: Logger;
  hooks?: EngineHooks;
}

/** What the engine hands the scheduler for one run. */
export interface EngineRun {
  taskName: string;
  jobId: string;
  scheduledAt: Date;
  startedAt: Date;
  attempt: number;
  signal: AbortSignal;
  /** Set when the previous run of this job started and never finished (its instance died). */
  rerunOf: PreviousRun | undefined;
}

export interface PreviousRun {
  scheduledAt: Date | null;
  startedAt: Date;
  instanceId: string | null;
}

export interface RunResult {
  outcome: "succeeded" | "failed";
  durationMs: number;
  error?: Error;
}

/** Where the engine reports what happens to runs; the scheduler turns these into events and logs. */
export interface EngineHooks {
  runStarted?(run: EngineRun): void;
  runFinished?(run: EngineRun, result: RunResult): void;
  lockLost?(run: EngineRun, reason: string): void;
  abandoned?(run: EngineRun, reason: string): void;
}

export type RunHandler = (run: EngineRun) => Promise<void>;

export interface TaskDefinitionOptions {
  /** The run is stopped (its signal fires) and recorded as failed after this long. */
  timeoutMs?: number | undefined;
}

export interface TaskJob extends LiveJob {
  id: string;
  lockedAt: Date | null;
  lastRunAt: Date | null;
  lastFinishedAt: Date | null;
  failCount: number;
  failReason: string | null;
  lastModifiedBy: string | null;
}

export interface RunRecord {
  taskName: string;
  outcome: "succeeded" | "failed" | "skipped";
  scheduledAt: Date;
  startedAt: Date | null;
  finishedAt: Date;
  durationMs: number | null;
  error: string | null;
  detail: string | null;
  instanceId: string | null;
  attempt: number | null;
  rerun: boolean;
}

export interface DrainOutcome {
  completed: number;
  abandoned: string[];
}

const DEFAULT_TIMEOUT_GRACE_MS = 30_000;
const DEFAULT_HEALTH_PROBE_MS = 2_000;

/** Agenda 'error' events repeat on every poll while the database is down: log each message once per window. */
const ERROR_LOG_WINDOW_MS = 30_000;

export class AgendaEngine {
  readonly #options: EngineOptions;
  readonly #logger: Logger;
  readonly #ledger = new RunLedger();
  readonly #running = new Map<string, { controller: AbortController; taskName: string }>();
  readonly #lastErrorLog = new Map<string, number>();
  readonly #health: DatabaseHealth;
  #watchdog: Watchdog | undefined;
  #repository: CronwardenJobRepository | undefined;
  #agenda: Agenda | undefined;
  #recorder: RunRecorder | undefined;
  #started = false;

  constructor(options: EngineOptions) {
    this.#options = options;
    this.#logger = options.logger.child({ component: "engine" });
    this.#health = new DatabaseHealth({
      pool: options.pool,
      logger: this.#logger,
      probeEveryMs: options.healthProbeMs ?? DEFAULT_HEALTH_PROBE_MS,
      onChange: (up) => {
        if (up) this.#repository?.holdTakeovers(options.lockLifetimeMs);
      },
    });
    // An idle pooled connection that dies (database restart) is an 'error' event on the pool:
    // unhandled, it would end the process. The health probe reports the outage.
    options.pool.on("error", (error) =>
      this.#logger.debug({ err: error }, "idle database connection closed"),
    );
  }

  get instanceId(): string {
    return this.#options.instanceId;
  }

  /** Creates the schema (once, under an advisory lock) and the Agenda instance. */
  async prepare(): Promise<void> {
    if (this.#agenda) return;
    const { pool, instanceId, processEveryMs, lockLifetimeMs } = this.#options;
    await ensureAgendaSchema(pool);
    const jobLogger = new PostgresJobLogger({ pool, tableName: sql.LOGS_TABLE, ensureSchema: false });
    this.#recorder = new RunRecorder(jobLogger, this.#ledger, instanceId, this.#logger);
    const notificationChannel = new PostgresNotificationChannel({ pool });
    // The channel is an EventEmitter that emits 'error' when its LISTEN connection drops (a
    // database restart); without a listener that is an uncaught exception. It reconnects itself.
    notificationChannel.on("error", (error: Error) => this.#logAgendaError(error, "notification channel"));
    const repository = new CronwardenJobRepository(pool, this.#ledger, this.#logger);
    this.#repository = repository;
    this.#watchdog = new Watchdog({ renewer: repository, lockLifetimeMs, logger: this.#logger });
    const backend: AgendaBackend = {
      name: "PostgreSQL (cronwarden)",
      repository,
      notificationChannel,
      logger: this.#recorder,
      ownsConnection: false,
      connect: async () => {},
      disconnect: async () => {},
    };
    const agenda = new Agenda({
      backend,
      name: instanceId,
      processEvery: processEveryMs,
      defaultLockLifetime: lockLifetimeMs,
      defaultConcurrency: 1,
      logging: true,
    });
    agenda.on("error", (error: Error) => this.#logAgendaError(error));
    await agenda.ready;
    this.#agenda = agenda;
  }

  /** Defines the Agenda job for a task; `handler` runs once per slot this instance locks. */
  defineTask(taskName: string, handler: RunHandler, options: TaskDefinitionOptions = {}): void {
    this.#requireAgenda().define(taskName, (job: Job) => this.#runJob(taskName, job, handler, options), {
      concurrency: 1,
      lockLimit: 1,
    });
  }

  async start(): Promise<void> {
    await this.#requireAgenda().start();
    this.#health.start();
    this.#started = true;
    this.#logger.info(
      { processEveryMs: this.#options.processEveryMs, lockLifetimeMs: this.#options.lockLifetimeMs },
      "engine started: polling for due runs",
    );
  }

  /**
   * Stops taking new runs and waits for running ones up to `timeoutMs`. Runs still going at the
   * deadline get their AbortSignal fired and are reported; their lock then expires normally.
   */
  async drain(timeoutMs: number): Promise<DrainOutcome> {
    const agenda = this.#agenda;
    if (!agenda || !this.#started) return { completed: 0, abandoned: [] };
    this.#started = false;
    await this.#health.stop();
    const result = await agenda.drain({ timeout: timeoutMs, closeConnection: false });
    const abandoned = [...this.#running.values()].map((run) => run.taskName);
    for (const run of this.#running.values())
      run.controller.abort(new Error("shutdown: drain timeout reached"));
    await this.#recorder?.flush();
    return { completed: result.completed, abandoned };
  }

  async listJobs(): Promise<TaskJob[]> {
    const rows = await sql.selectTaskJobs(this.#options.pool);
    return rows.map((row) => ({
      id: row.id,
      name: row.name,
      disabled: row.disabled,
      cron: row.repeat_interval,
      timezone: row.repeat_timezone,
      nextRunAt: row.next_run_at,
      lockedAt: row.locked_at,
      lastRunAt: row.last_run_at,
      lastFinishedAt: row.last_finished_at,
      failCount: row.fail_count ?? 0,
      failReason: row.fail_reason,
      lastModifiedBy: row.last_modified_by,
    }));
  }

  /** Creates the repeating `single` job of a task; its first run is the next slot after now. */
  async createJob(taskName: string, cron: string, timezone: string, enabled: boolean): Promise<void> {
    const job = this.#requireAgenda().create(taskName);
    job.attrs.type = "single";
    job.repeatEvery(cron, { timezone });
    if (!enabled) job.disable();
    await job.save();
  }

  /**
   * Changes cron and timezone in place (same row, lock and history). The next run is computed
   * from `now` in the new timezone, by Agenda's own algorithm, and written with the schedule in
   * one statement. Not `repeatEvery()` + `save()`: that computes from the last run (a time that
   * can be past, firing at once) and `save()` clears the failure fields.
   */
  async updateSchedule(taskName: string, cron: string, timezone: string, now: Date): Promise<Date> {
    const probe = this.#requireAgenda().create(taskName);
    probe.attrs.lastRunAt = now; // the reference repeatEvery() computes the next run from
    probe.repeatEvery(cron, { timezone });
    const nextRunAt = probe.attrs.nextRunAt;
    if (!nextRunAt)
      throw new Error(`cron "${cron}" in ${timezone} has no next run after ${now.toISOString()}`);
    await sql.updateSchedule(this.#options.pool, {
      name: taskName,
      cron,
      timezone,
      nextRunAt,
      modifiedBy: this.instanceId,
    });
    return nextRunAt;
  }

  async setEnabled(taskName: string, enabled: boolean): Promise<void> {
    await sql.setDisabled(this.#options.pool, taskName, !enabled, this.instanceId);
  }

  /** Runs `work` while holding a database-wide lock, so instances reconcile one at a time. */
  async withReconcileLock<T>(work: () => Promise<T>): Promise<T> {
    const client = await this.#options.pool.connect();
    try {
      await client.query("SELECT pg_advisory_lock($1)", [sql.RECONCILE_LOCK_KEY]);
      try {
        return await work();
      } finally {
        await client.query("SELECT pg_advisory_unlock($1)", [sql.RECONCILE_LOCK_KEY]);
      }
    } finally {
      client.release();
    }
  }

  /** Finished runs of a task, newest first, from Agenda's run log. */
  async listRuns(taskName: string, limit = 50): Promise<RunRecord[]> {
    const rows = await sql.selectRuns(this.#options.pool, taskName, limit);
    return rows.map((row) => {
      const meta = row.meta ?? {};
      const text = (key: string) => (typeof meta[key] === "string" ? (meta[key] as string) : null);
      const startedAt = text("startedAt");
      return {
        taskName: row.job_name,
        outcome: (text("outcome") ??
          (row.event === "success" ? "succeeded" : "failed")) as RunRecord["outcome"],
        scheduledAt: new Date(text("scheduledAt") ?? row.timestamp),
        startedAt: startedAt ? new Date(startedAt) : null,
        finishedAt: new Date(text("finishedAt") ?? row.timestamp),
        durationMs: row.duration,
        error: row.error,
        detail: text("detail"),
        instanceId: text("instanceId") ?? row.agenda_name,
        attempt: typeof meta.attempt === "number" ? meta.attempt : null,
        rerun: meta.rerun === true,
      };
    });
  }

  async #runJob(
    taskName: string,
    job: Job,
    handler: RunHandler,
    options: TaskDefinitionOptions,
  ): Promise<void> {
    const jobId = String(job.attrs._id);
    const startedAt = new Date();
    const entry = this.#ledger.starting(jobId, startedAt, 1);
    const skipReason = await this.#whySkip(jobId, job);
    if (skipReason) {
      this.#ledger.settle(jobId, "skipped", skipReason);
      this.#logger.info({ task: taskName, slot: entry.scheduledAt, reason: skipReason }, "run skipped");
      return;
    }
    const rerunOf = entry.previousRunUnfinished
      ? await this.#previousRun(jobId, job.attrs.lastRunAt ?? startedAt)
      : undefined;
    if (rerunOf?.scheduledAt) entry.scheduledAt = rerunOf.scheduledAt;
    entry.rerun = rerunOf !== undefined;

    const controller = new AbortController();
    const run: EngineRun = {
      taskName,
      jobId,
      scheduledAt: entry.scheduledAt,
      startedAt,
      attempt: entry.attempt ?? 1,
      signal: controller.signal,
      rerunOf,
    };
    const hooks = this.#options.hooks ?? {};
    this.#running.set(jobId, { controller, taskName });
    hooks.runStarted?.(run);

    let loseLock: (reason: string) => void = () => {};
    const lockLost = new Promise<string>((resolve) => {
      loseLock = resolve;
    });
    const stopWatchdog = this.#requireWatchdog().watch({
      jobId,
      taskName,
      lockedAt: entry.lockToken ?? startedAt,
      onRenewed: (lockedAt) => {
        this.#ledger.renewed(jobId, lockedAt);
        job.attrs.lockedAt = lockedAt; // Agenda's own expiry check reads this
      },
      onLost: (reason) => loseLock(reason),
    });
    let result: RunResult;
    try {
      result = await superviseRun({
        run: () => handler(run),
        abort: (error) => controller.abort(error),
        lockLost,
        timeoutMs: options.timeoutMs,
        graceMs: this.#options.timeoutGraceMs ?? DEFAULT_TIMEOUT_GRACE_MS,
        taskName,
        onLockLost: (reason) => {
          this.#logger.error(
            { task: taskName, slot: run.scheduledAt, reason },
            `lock lost: ${reason}; the run's signal fired`,
          );
          hooks.lockLost?.(run, reason);
        },
        onAbandoned: (reason) => {
          this.#logger.error({ task: taskName, slot: run.scheduledAt, reason }, `run abandoned: ${reason}`);
          hooks.abandoned?.(run, reason);
        },
        startedAt,
      });
    } finally {
      await stopWatchdog();
      this.#running.delete(jobId);
    }
    this.#ledger.settle(jobId, result.outcome, result.error?.message);
    hooks.runFinished?.(run, result);
    if (result.error) throw result.error;
  }

  /** Agenda pre-locks jobs due within one poll; the config may have changed since. */
  async #whySkip(jobId: string, job: Job): Promise<string | undefined> {
    const guard = await sql.selectRunGuard(this.#options.pool, jobId);
    if (!guard) return "the job row no longer exists";
    if (guard.disabled) return "the task was disabled after this slot was locked";
    if (
      guard.repeat_interval !== String(job.attrs.repeatInterval) ||
      guard.repeat_timezone !== (job.attrs.repeatTimezone ?? null)
    ) {
      return `the schedule changed to "${guard.repeat_interval}" (${guard.repeat_timezone}) after this slot was locked; the next run follows the new schedule`;
    }
    return undefined;
  }

  /** The run that died: the last start recorded before this run's own. */
  async #previousRun(jobId: string, before: Date): Promise<PreviousRun> {
    const row = await sql.selectLastStart(this.#options.pool, jobId, before);
    const scheduledAt = typeof row?.meta?.scheduledAt === "string" ? new Date(row.meta.scheduledAt) : null;
    const instanceId =
      typeof row?.meta?.instanceId === "string" ? row.meta.instanceId : (row?.agenda_name ?? null);
    return { scheduledAt, startedAt: row?.timestamp ?? before, instanceId };
  }

  /**
   * Agenda reports database trouble on every poll of every job name. While the health probe
   * says the database is down, those reports add nothing to its one outage line: debug only.
   */
  #logAgendaError(error: Error, origin = "agenda"): void {
    const message = `${origin}: ${error.message}`;
    void this.#health.probe().then((up) => {
      if (!up) {
        this.#logger.debug({ err: error }, message);
        return;
      }
      const now = Date.now();
      const last = this.#lastErrorLog.get(message);
      if (last !== undefined && now - last < ERROR_LOG_WINDOW_MS) return;
      this.#lastErrorLog.set(message, now);
      this.#logger.error({ err: error }, message);
    });
  }

  #requireWatchdog(): Watchdog {
    if (!this.#watchdog) throw new Error("AgendaEngine.prepare() must complete first");
    return this.#watchdog;
  }

  #requireAgenda(): Agenda {
    if (!this.#agenda) throw new Error("AgendaEngine.prepare() must complete first");
    return this.#agenda;
  }
}

import { PostgresJobLogger } from "@agendajs/postgres-backend";
import { Agenda, type AgendaBackend, Job, type JobId } from "agenda";
import { type Clock, systemClock } from "../core/clock.js";
import { SCHEDULER_DEFAULTS } from "../core/defaults.js";
import type { Logger } from "../core/logger.js";
import { POLL_PHASES } from "../core/periodic.js";
import { guardHooks, ListenerFailures } from "../core/safeEmit.js";
import { loadRunTracer, type RunTracer } from "../observability/tracing.js";
import { ClaimedRuns, startAheadOf } from "./claimedRuns.js";
import { DatabaseHealth } from "./databaseHealth.js";
import { cacheDebugColors } from "./debugColors.js";
import { DependencyCoordinator } from "./dependencies.js";
import type {
  ChainSlot,
  DrainOutcome,
  EngineHooks,
  EngineOptions,
  EngineRun,
  RunHandler,
  RunRecord,
  RunSummary,
  TaskDefinitionOptions,
  TaskJob,
} from "./engineApi.js";
import { EngineErrors } from "./engineErrors.js";
import { readRunSummaries, readTaskJobs, runRecordOfRow } from "./jobReads.js";
import { CronwardenJobRepository } from "./jobRepository.js";
import { JobWrites, type WakeJob, withReconcileLock } from "./jobWrites.js";
import { InstanceLiveness } from "./liveness.js";
import { MissedSlotDetector } from "./missedSlotDetector.js";
import { JobNotificationChannel } from "./notificationChannel.js";
import { RunChecks } from "./runChecks.js";
import { RunRecorder } from "./runRecorder.js";
import { checkSchema, migrateSchema } from "./schema.js";
import { SkippedSlots } from "./skippedSlots.js";
import type { SlotRunnerPorts } from "./slotRunner.js";
import * as sql from "./sql.js";
import { StatementBatch } from "./statementBatch.js";
import { TaskRunner } from "./taskRunner.js";
import { Watchdog } from "./watchdog.js";

export type * from "./engineApi.js";

/**
 * The only module that knows Agenda. It owns the Agenda instance on a `pg` Pool it is given
 * (and does not close), defines one Agenda job per task, and offers the scheduler a narrow
 * surface: define, start, drain, read the job rows, and change them in place.
 */

const DEFAULT_TIMEOUT_GRACE_MS = SCHEDULER_DEFAULTS.timeoutGraceMs;
const DEFAULT_HEALTH_PROBE_MS = SCHEDULER_DEFAULTS.healthProbeMs;
const DEFAULT_MISSED_SLOT_GRACE_MS = SCHEDULER_DEFAULTS.missedSlotGraceMs;
/** How many recent outcomes a status listing carries (the dashboard's strip). */
const RECENT_OUTCOMES = 10;
const DEFAULT_MISSED_SLOT_CHECK_MS = SCHEDULER_DEFAULTS.missedSlotCheckMs;
const DEFAULT_LIVENESS_CHECK_MS = SCHEDULER_DEFAULTS.livenessCheckMs;
const DEFAULT_MAX_CONCURRENCY = SCHEDULER_DEFAULTS.maxConcurrency;
/**
 * The notification channel's longest wait between reconnects while the database is down
 * (src/engine/notificationChannel.ts): at most a poll, past which the claim loop's own pass has
 * looked for what a lost notification would have woken it for.
 */
const channelReconnectMaxMs = (processEveryMs: number) => Math.max(1_000, processEveryMs);

/** What prepare() builds, once. */
interface EngineParts {
  agenda: Agenda;
  recorder: RunRecorder;
  dependencies: DependencyCoordinator;
  channel: JobNotificationChannel;
  repository: CronwardenJobRepository;
  runs: ClaimedRuns;
  liveness: InstanceLiveness | undefined;
  missedSlots: MissedSlotDetector;
  writes: JobWrites;
}

export class AgendaEngine {
  readonly #options: EngineOptions;
  readonly #logger: Logger;
  readonly #clock: Clock;
  readonly #errors: EngineErrors;
  readonly #health: DatabaseHealth;
  #parts: EngineParts | undefined;
  #started = false;

  constructor(options: EngineOptions) {
    cacheDebugColors();
    this.#logger = options.logger.child({ component: "engine" });
    this.#clock = options.clock ?? systemClock;
    // every hook call goes through one guard: a hook that throws or rejects never fails a run
    this.#options = {
      ...options,
      hooks: guardHooks(options.hooks, new ListenerFailures(this.#logger, "hook")),
    };
    this.#health = new DatabaseHealth({
      pool: options.pool,
      logger: this.#logger,
      probeEveryMs: options.healthProbeMs ?? DEFAULT_HEALTH_PROBE_MS,
      onChange: (up) => {
        if (up) this.#parts?.repository.holdTakeovers(options.lockLifetimeMs);
      },
    });
    this.#errors = new EngineErrors({
      logger: this.#logger,
      health: this.#health,
      maxConcurrency: options.maxConcurrency ?? DEFAULT_MAX_CONCURRENCY,
    });
    // An idle pooled connection that dies (database restart) is an 'error' event on the pool:
    // unhandled, it would end the process. The health probe reports the outage.
    options.pool.on("error", (error) =>
      this.#logger.debug({ err: error }, "idle database connection closed"),
    );
    // A checked-out connection (a transaction, Agenda's LISTEN client before it adds its own
    // listener) that dies between two queries is an 'error' event on that client, which the pool
    // does not listen to while it is out: unhandled, it ends the process (seen in a chaos run when
    // PostgreSQL restarted). The query in flight, or the next one, fails and is handled there.
    const guarded = new WeakSet<object>();
    options.pool.on("acquire", (client) => {
      if (guarded.has(client)) return;
      guarded.add(client);
      client.on("error", (error) =>
        this.#logger.debug({ err: error }, "database connection closed while in use"),
      );
    });
  }

  get instanceId(): string {
    return this.#options.instanceId;
  }

  /**
   * Creates or upgrades the schema (once, under an advisory lock), or with `migrate: false` only
   * checks that it is current; then builds the engine's parts around one Agenda instance.
   */
  async prepare(): Promise<void> {
    if (this.#parts) return;
    await this.#schema();
    const { pool, instanceId } = this.#options;
    const jobLogger = new PostgresJobLogger({ pool, tableName: sql.LOGS_TABLE, ensureSchema: false });
    const recorder = new RunRecorder(
      jobLogger,
      instanceId,
      this.#logger,
      // a start row and the outcome row that replaces it never share a statement
      new StatementBatch((rows) => sql.writeRunLogRows(pool, rows).then(() => rows.map(() => undefined)), {
        key: (row) => row.replaces ?? row.id,
      }),
      this.#clock,
    );
    const dependencies = this.#dependencies();
    // OpenTelemetry, an optional peer, is imported here once (docs/tracing.md)
    const tracer = await loadRunTracer(instanceId);
    recorder.onOutcome = (taskName, meta) => dependencies.outcomeRecorded(taskName, meta);
    const channel = this.#notificationChannel();
    const repository = this.#repository();
    const agenda = await this.#agenda({ repository, channel, jobLogger });
    const runs = new ClaimedRuns({
      agenda,
      repository,
      ports: this.#runPorts(repository, recorder, dependencies, tracer),
      instanceId,
      processEveryMs: this.#options.processEveryMs,
      lockLifetimeMs: this.#options.lockLifetimeMs,
      maxConcurrency: this.#options.maxConcurrency ?? DEFAULT_MAX_CONCURRENCY,
      clock: this.#clock,
      logger: this.#logger,
      hooks: this.#options.hooks ?? {},
      wake: (job) => this.#wake(job),
      onRunError: (error) => this.#errors.runError(error),
    });
    channel.subscribe((notification) => {
      const due = notification.nextRunAt;
      if (!due || new Date(due).getTime() <= this.#clock() + runs.lookAheadMs) runs.claimNow();
    });
    this.#parts = {
      agenda,
      recorder,
      dependencies,
      channel,
      repository,
      runs,
      liveness: this.#liveness(),
      missedSlots: this.#missedSlotDetector(() => [...runs.definedTasks]),
      writes: new JobWrites({
        pool,
        agenda,
        dependencies,
        instanceId,
        clock: this.#clock,
        wake: (job) => this.#wake(job),
      }),
    };
  }

  async #schema(): Promise<void> {
    const { pool } = this.#options;
    if (this.#options.migrate === false) {
      const state = await checkSchema(pool);
      this.#logger.info({ schemaVersion: state.version }, "schema is current (schema changes are off)");
      return;
    }
    const migrated = await migrateSchema(pool);
    if (migrated.from !== migrated.to)
      this.#logger.info(
        { from: migrated.from, to: migrated.to },
        `schema migrated from version ${migrated.from ?? "(none)"} to ${migrated.to}`,
      );
  }

  #dependencies(): DependencyCoordinator {
    const { pool, instanceId, processEveryMs } = this.#options;
    return new DependencyCoordinator({
      pool,
      instanceId,
      logger: this.#logger,
      hooks: this.#options.hooks ?? {},
      sweepEveryMs: this.#options.dependencySweepMs,
      sweepPhaseMs: POLL_PHASES.dependencySweep * processEveryMs,
      wake: (rows) => {
        this.#parts?.runs.claimNow();
        for (const row of rows)
          void this.#wake({ id: row.id, name: row.name, nextRunAt: row.next_run_at, priority: 0 }).catch(
            () => {},
          );
      },
    });
  }

  #notificationChannel(): JobNotificationChannel {
    const channel = new JobNotificationChannel({
      pool: this.#options.pool,
      reconnect: { enabled: true, maxDelayMs: channelReconnectMaxMs(this.#options.processEveryMs) },
    });
    // The channel is an EventEmitter that emits 'error' when its LISTEN connection drops (a
    // database restart); without a listener that is an uncaught exception. It reconnects itself.
    channel.on("error", (error: Error) => this.#errors.componentError(error, "notification channel"));
    return channel;
  }

  #repository(): CronwardenJobRepository {
    const { pool, lockLifetimeMs, processEveryMs } = this.#options;
    return new CronwardenJobRepository(pool, this.#logger, {
      lockLifetimeMs,
      clock: this.#clock,
      onRowGivenBack: () => this.#parts?.runs.claimNow(),
      onHandedOff: (jobId, taskName) => {
        // the other instances lock it now, not at their next poll
        void this.#wake({ id: jobId, name: taskName, nextRunAt: new Date(this.#clock()), priority: 0 }).catch(
          () => {},
        );
      },
      catchUpGraceMs: Math.max(
        this.#options.missedSlotGraceMs ?? DEFAULT_MISSED_SLOT_GRACE_MS,
        2 * processEveryMs,
      ),
      onPaused: (_jobId, taskName, pause) => {
        this.#logger.warn(
          { task: taskName, failures: pause.failures, slot: pause.slot, lastError: pause.lastError },
          `task "${taskName}" paused after ${pause.failures} failed slot(s) in a row (pauseOnFailure); it resumes when its config entry changes or by POST /tasks/${taskName}/resume`,
        );
        this.#options.hooks?.taskPaused?.({ taskName, ...pause });
      },
    });
  }

  /** Agenda on our backend: the job documents, `create`/`save`, the job log, the notifications. */
  async #agenda(parts: {
    repository: CronwardenJobRepository;
    channel: JobNotificationChannel;
    jobLogger: PostgresJobLogger;
  }): Promise<Agenda> {
    const backend: AgendaBackend = {
      name: "PostgreSQL (cronwarden)",
      repository: parts.repository,
      notificationChannel: parts.channel,
      logger: parts.jobLogger,
      ownsConnection: false,
      connect: async () => {},
      disconnect: async () => {},
    };
    const agenda = new Agenda({
      backend,
      name: this.#options.instanceId,
      processEvery: this.#options.processEveryMs,
      defaultLockLifetime: this.#options.lockLifetimeMs,
      defaultConcurrency: 1,
      maxConcurrency: this.#options.maxConcurrency ?? DEFAULT_MAX_CONCURRENCY,
      logging: true,
    });
    agenda.on("error", (error: Error) => this.#errors.runError(error));
    await agenda.ready;
    return agenda;
  }

  /** What each run's owner (src/engine/slotRunner.ts) uses: the rows, the recorder, the checks and attempts. */
  #runPorts(
    repository: CronwardenJobRepository,
    recorder: RunRecorder,
    dependencies: DependencyCoordinator,
    tracer: RunTracer,
  ): SlotRunnerPorts {
    const { pool, lockLifetimeMs, instanceId } = this.#options;
    const hooks = this.#options.hooks ?? {};
    const runHooks: EngineHooks = {
      ...hooks,
      runStarted: (run: EngineRun) => {
        hooks.runStarted?.(run);
        dependencies.runStarted(run);
      },
    };
    const logger = this.#logger;
    const clock = this.#clock;
    const skipped = new SkippedSlots({ recorder, logger, hooks: runHooks, clock });
    const runner = new TaskRunner({
      watchdog: new Watchdog({ renewer: repository, lockLifetimeMs, logger, now: () => new Date(clock()) }),
      recorder,
      logger,
      hooks: runHooks,
      checks: new RunChecks({ pool, logger, lockLifetimeMs, clock, skipped, dependencies }),
      skipped,
      timeoutGraceMs: this.#options.timeoutGraceMs ?? DEFAULT_TIMEOUT_GRACE_MS,
      lockLifetimeMs,
      clock,
      startAheadMs: startAheadOf(lockLifetimeMs),
      tracer,
    });
    return { rows: repository, recorder, runner, logger, clock, instanceId };
  }

  #liveness(): InstanceLiveness | undefined {
    const { pool, instanceId, processEveryMs } = this.#options;
    const livenessCheckMs = this.#options.livenessCheckMs ?? DEFAULT_LIVENESS_CHECK_MS;
    if (livenessCheckMs <= 0) return undefined;
    return new InstanceLiveness({
      pool,
      instanceId,
      checkEveryMs: livenessCheckMs,
      logger: this.#logger,
      // the check's answer is the health probe's; a failed check asks the pool at once
      onChecked: (answered) => {
        if (answered) this.#health.confirmUp();
        else void this.#health.probe();
      },
      onReleased: (rows) => {
        this.#parts?.runs.claimNow();
        const soon = this.#clock() + processEveryMs;
        for (const row of rows)
          if (row.next_run_at && row.next_run_at.getTime() <= soon)
            void this.#wake({
              id: row.id,
              name: row.name,
              nextRunAt: row.next_run_at,
              priority: row.priority,
            }).catch(() => {});
      },
    });
  }

  #missedSlotDetector(taskNames: () => string[]): MissedSlotDetector {
    const { pool, processEveryMs, lockLifetimeMs } = this.#options;
    return new MissedSlotDetector({
      pool,
      taskNames,
      graceMs: Math.max(this.#options.missedSlotGraceMs ?? DEFAULT_MISSED_SLOT_GRACE_MS, 2 * processEveryMs),
      lockLifetimeMs,
      checkEveryMs: this.#options.missedSlotCheckMs ?? DEFAULT_MISSED_SLOT_CHECK_MS,
      phaseMs: POLL_PHASES.missedSlotCheck * processEveryMs,
      logger: this.#logger,
      onMissed: (missed) => this.#options.hooks?.missedSlot?.(missed),
      nudge: (row) =>
        this.#wake({ id: row.id, name: row.name, nextRunAt: row.next_run_at, priority: row.priority }),
      repairLostNextRun: async () => this.#options.repairLostNextRun?.(),
    });
  }

  /** The parts prepare() built. */
  #require(): EngineParts {
    if (!this.#parts) throw new Error("AgendaEngine.prepare() must complete first");
    return this.#parts;
  }

  /**
   * Defines a task; `handler` runs once per slot this instance claims (src/engine/claimedRuns.ts).
   */
  defineTask(taskName: string, handler: RunHandler, options: TaskDefinitionOptions = {}): void {
    this.#require().runs.define(taskName, handler, options);
  }

  async start(): Promise<void> {
    const parts = this.#require();
    // A new instance cannot tell a lock whose owner died from one whose owner could not renew it
    // through a database outage this instance did not see: it takes nothing over for one lifetime.
    parts.repository.holdTakeovers(this.#options.lockLifetimeMs);
    this.#errors.drained = false;
    // live before the first lock: a lock under this id must never look like a dead instance's
    await parts.liveness?.start();
    await parts.channel.connect();
    parts.runs.start();
    this.#health.start();
    parts.missedSlots.start();
    parts.dependencies.start();
    this.#started = true;
    this.#logger.info(
      { processEveryMs: this.#options.processEveryMs, lockLifetimeMs: this.#options.lockLifetimeMs },
      "engine started: polling for due runs",
    );
  }

  /**
   * Stops taking new runs and waits for running ones up to `timeoutMs`. Runs still going at the
   * deadline are cut off and handed off: recorded interrupted, their slot released for the other
   * instances to re-run at once, instead of failing them (src/engine/claimedRuns.ts).
   */
  async drain(timeoutMs: number): Promise<DrainOutcome> {
    const parts = this.#parts;
    if (!parts || !this.#started) {
      // a start that failed at its channel's connect left the channel reconnecting
      await parts?.channel.disconnect().catch(() => {});
      await parts?.liveness?.stop();
      return { completed: 0, handedOff: [], abandoned: [] };
    }
    this.#started = false;
    this.#errors.drained = true;
    await this.#health.stop();
    await parts.missedSlots.stop();
    const drained = await parts.runs.drain(timeoutMs);
    await parts.dependencies.stop();
    await parts.channel.disconnect().catch(() => {});
    await parts.recorder.flush();
    // last: until here a crash is not a clean stop (runs still saving their end)
    await parts.liveness?.stop();
    return drained;
  }

  async listJobs(): Promise<TaskJob[]> {
    return readTaskJobs(this.#options.pool);
  }

  /** A digest of what the reconcile planner reads of the job rows (sql/jobs.ts). */
  plannedColumnsDigest(): Promise<string> {
    return sql.selectPlannedColumnsDigest(this.#options.pool);
  }

  /** The job rows' writes (src/engine/jobWrites.ts); prepare() makes them. */
  #writes(): JobWrites {
    return this.#require().writes;
  }

  createJob(...args: Parameters<JobWrites["createJob"]>): Promise<void> {
    return this.#writes().createJob(...args);
  }

  setDependency(...args: Parameters<JobWrites["setDependency"]>): Promise<void> {
    return this.#writes().setDependency(...args);
  }

  updateSchedule(...args: Parameters<JobWrites["updateSchedule"]>): Promise<Date> {
    return this.#writes().updateSchedule(...args);
  }

  setPolicy(...args: Parameters<JobWrites["setPolicy"]>): Promise<void> {
    return this.#writes().setPolicy(...args);
  }

  setJitter(...args: Parameters<JobWrites["setJitter"]>): Promise<void> {
    return this.#writes().setJitter(...args);
  }

  setOverlap(...args: Parameters<JobWrites["setOverlap"]>): Promise<void> {
    return this.#writes().setOverlap(...args);
  }

  setEnabled(...args: Parameters<JobWrites["setEnabled"]>): Promise<void> {
    return this.#writes().setEnabled(...args);
  }

  setPauseOnFailure(...args: Parameters<JobWrites["setPauseOnFailure"]>): Promise<void> {
    return this.#writes().setPauseOnFailure(...args);
  }

  resume(...args: Parameters<JobWrites["resume"]>): ReturnType<JobWrites["resume"]> {
    return this.#writes().resume(...args);
  }

  requestRun(...args: Parameters<JobWrites["requestRun"]>): ReturnType<JobWrites["requestRun"]> {
    return this.#writes().requestRun(...args);
  }

  /** Runs `work` while holding a database-wide lock, so instances reconcile one at a time. */
  withReconcileLock<T>(work: () => Promise<T>): Promise<T> {
    return withReconcileLock(this.#options.pool, work);
  }

  /** Per slot, the state of each downstream's wait for its upstreams, newest first. */
  async chains(query: { tasks?: string[]; limit: number }): Promise<ChainSlot[]> {
    return this.#require().dependencies.chains(query);
  }

  /** Runs the dependency sweeper now (tests; it also runs every second). */
  sweepDependencies(): Promise<void> {
    return this.#require().dependencies.sweep();
  }

  /** Finished runs of a task, newest first, from Agenda's run log. */
  async listRuns(taskName: string, limit = 50): Promise<RunRecord[]> {
    const rows = await sql.selectRuns(this.#options.pool, taskName, limit);
    return rows.map(runRecordOfRow);
  }

  /** Latest outcome, error, start instance and recent outcomes of every task, for status listings. */
  runSummaries(recent = RECENT_OUTCOMES): Promise<RunSummary[]> {
    return readRunSummaries(this.#options.pool, recent);
  }

  /** Deletes run-log rows past the retention (one instance at a time); null when another instance is at it. */
  pruneRunLog(retention: sql.RunLogRetention): Promise<number | null> {
    return sql.pruneRunLog(this.#options.pool, retention);
  }

  /** Whether the database answered the last probe. */
  get databaseUp(): boolean {
    return this.#health.up;
  }

  get started(): boolean {
    return this.#started;
  }

  /** Runs the missed-slot check now (tests; the periodic check calls the same). */
  checkMissedSlots() {
    return this.#require().missedSlots.check();
  }

  /** Wakes the workers of every instance for a job that is due now (PostgreSQL NOTIFY). */
  async #wake(job: WakeJob): Promise<void> {
    const agenda = this.#require().agenda;
    const attrs = {
      _id: job.id as JobId,
      name: job.name,
      nextRunAt: job.nextRunAt,
      priority: job.priority,
      type: "single" as const,
      data: {},
    };
    await agenda.publishJobNotification(new Job(agenda, attrs));
  }
}

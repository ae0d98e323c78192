import { PostgresJobLogger } from "@agendajs/postgres-backend";
import { Agenda, type AgendaBackend } from "agenda";
import type { Pool } from "pg";
import type { Clock } from "../core/clock.js";
import { SCHEDULER_DEFAULTS } from "../core/defaults.js";
import type { Logger } from "../core/logger.js";
import { POLL_PHASES } from "../core/periodic.js";
import { StatementBatch } from "../db/statementBatch.js";
import { loadRunTracer, type RunTracer } from "../observability/tracing.js";
import { BACKFILL_WAKE, BackfillRunner } from "./backfillRunner.js";
import { ClaimedRuns, startAheadOf } from "./claimedRuns.js";
import type { DatabaseHealth } from "./databaseHealth.js";
import type { EngineHooks, EngineOptions, EngineRun, TaskDependencies } from "./engineApi.js";
import type { EngineErrors } from "./engineErrors.js";
import { JobBatchWrites } from "./jobBatchWrites.js";
import { CronwardenJobRepository } from "./jobRepository.js";
import { JobWrites, type WakeJob } from "./jobWrites.js";
import { InstanceLiveness } from "./liveness.js";
import { LockKeeper } from "./lockKeeper.js";
import { MissedSlotDetector } from "./missedSlotDetector.js";
import { JobNotificationChannel } from "./notificationChannel.js";
import { PauseGate } from "./pauseGate.js";
import { RunChecks } from "./runChecks.js";
import { RunRecorder } from "./runRecorder.js";
import { SkippedSlots } from "./skippedSlots.js";
import type { SlotRunnerPorts } from "./slotRunner.js";
import * as sql from "./sql.js";
import { TaskRunner, type TaskRunnerDeps } from "./taskRunner.js";

/**
 * The engine's wiring: builds, once, the parts that AgendaEngine (src/engine/agendaEngine.ts)
 * starts and drains, around one Agenda instance, and connects their callbacks. Nothing here runs
 * on its own; the engine's lifecycle does.
 */

const DEFAULT_TIMEOUT_GRACE_MS = SCHEDULER_DEFAULTS.timeoutGraceMs;
const DEFAULT_MISSED_SLOT_GRACE_MS = SCHEDULER_DEFAULTS.missedSlotGraceMs;
const DEFAULT_MISSED_SLOT_CHECK_MS = SCHEDULER_DEFAULTS.missedSlotCheckMs;
const DEFAULT_LIVENESS_CHECK_MS = SCHEDULER_DEFAULTS.livenessCheckMs;
export const DEFAULT_MAX_CONCURRENCY = SCHEDULER_DEFAULTS.maxConcurrency;
/**
 * The notification channel's longest wait between reconnects while the database is down
 * (src/engine/notificationChannel.ts): at most a poll, past which the claim loop's own pass has
 * looked for what a lost notification would have woken it for.
 */
const channelReconnectMaxMs = (processEveryMs: number) => Math.max(1_000, processEveryMs);

/** What the engine builds once and then starts and drains. */
export interface EngineParts {
  agenda: Agenda;
  recorder: RunRecorder;
  dependencies: TaskDependencies;
  channel: JobNotificationChannel;
  repository: CronwardenJobRepository;
  runs: ClaimedRuns;
  liveness: InstanceLiveness | undefined;
  missedSlots: MissedSlotDetector;
  writes: JobWrites;
  /** The reconciler's writes of many rows at once (src/engine/jobBatchWrites.ts). */
  batchWrites: JobBatchWrites;
  /** Renews running jobs' locks from its own thread; closed after the drain. */
  locks: LockKeeper;
  /** The namespace's pause-all switch (src/engine/pauseGate.ts). */
  gate: PauseGate;
  /** Runs the slots of backfills (docs/operations.md, "Backfill"). */
  backfillRunner: BackfillRunner;
}

/**
 * An engine built without task dependencies (a test's, or a tool's that only writes rows): the
 * rows still take their dependency, but no wait opens and no downstream run is queued.
 */
function noDependencies(pool: Pool): TaskDependencies {
  return {
    start() {},
    stop: () => Promise.resolve(),
    beforeRun: () => Promise.resolve(undefined),
    runStarted() {},
    outcomeRecorded() {},
    setDependency: (taskName, spec) => sql.setDependencyRow(pool, taskName, spec),
    sweep: () => Promise.resolve(),
    chains: () => Promise.resolve([]),
  };
}

/** The job id of a backfill's wake notification (no job has it). */
export const BACKFILL_WAKE_ID = "00000000-0000-0000-0000-000000000000";

/** What the wiring takes from the engine: its options, clock, log, error and health reporters, and two calls back. */
export interface EngineContext {
  options: EngineOptions;
  logger: Logger;
  clock: Clock;
  errors: EngineErrors;
  health: DatabaseHealth;
  /** The parts once built: callbacks that fire later reach them through this. */
  parts(): EngineParts | undefined;
  /** Wakes every instance's workers for a job due now (NOTIFY). */
  wake(job: WakeJob): Promise<void>;
}

export class EngineWiring {
  readonly #ctx: EngineContext;
  readonly #options: EngineOptions;
  readonly #logger: Logger;
  readonly #clock: Clock;
  readonly #errors: EngineErrors;
  readonly #health: DatabaseHealth;
  /** The live runs' runner parts, which a backfill slot's runner shares (src/engine/backfillRunner.ts). */
  #runnerDeps: TaskRunnerDeps | undefined;

  constructor(ctx: EngineContext) {
    this.#ctx = ctx;
    this.#options = ctx.options;
    this.#logger = ctx.logger;
    this.#clock = ctx.clock;
    this.#errors = ctx.errors;
    this.#health = ctx.health;
  }

  /** The run log's writes, batched (src/engine/sql/runLog.ts writeRunLogRows). */
  #runLogBatch(): StatementBatch<sql.RunLogInsert, unknown> {
    const { pool, runLogPartitionHours: hours } = this.#options;
    // a start row and the outcome row that replaces it never share a statement
    return new StatementBatch<sql.RunLogInsert, unknown>(
      (rows) => sql.writeRunLogRows(pool, rows, hours).then(() => rows.map(() => undefined)),
      { key: (row) => row.replaces ?? row.id },
    );
  }

  /** The parts, built in order: the recorder, the dependencies, the rows, Agenda, the claimed runs. */
  async build(): Promise<EngineParts> {
    const { pool, instanceId } = this.#options;
    const jobLogger = new PostgresJobLogger({ pool, tableName: sql.LOGS_TABLE, ensureSchema: false });
    const recorder = new RunRecorder(jobLogger, instanceId, this.#logger, this.#runLogBatch(), this.#clock);
    const dependencies = this.#dependencies();
    // OpenTelemetry, an optional peer, is imported here once (docs/tracing.md)
    const tracer = await loadRunTracer(instanceId);
    recorder.onOutcome = (taskName, meta) => dependencies.outcomeRecorded(taskName, meta);
    const channel = this.#notificationChannel();
    const gate = this.#pauseGate(channel);
    const repository = this.#repository();
    const agenda = await this.#agenda({ repository, channel, jobLogger });
    const locks = new LockKeeper({
      pool,
      renewer: repository,
      lockLifetimeMs: this.#options.lockLifetimeMs,
      logger: this.#logger,
      clock: this.#clock,
    });
    const runs = new ClaimedRuns({
      agenda,
      repository,
      ports: this.#runPorts({ repository, recorder, dependencies, tracer, locks, paused: () => gate.paused }),
      instanceId,
      processEveryMs: this.#options.processEveryMs,
      lockLifetimeMs: this.#options.lockLifetimeMs,
      maxConcurrency: this.#options.maxConcurrency ?? DEFAULT_MAX_CONCURRENCY,
      clock: this.#clock,
      logger: this.#logger,
      hooks: this.#options.hooks ?? {},
      wake: (job) => this.#ctx.wake(job),
      onRunError: (error) => this.#errors.runError(error),
      paused: () => gate.paused,
    });
    const backfillRunner = this.#backfillRunner({
      agenda,
      runs,
      recorder,
      dependencies,
      locks,
      paused: () => gate.paused,
    });
    channel.subscribe((notification) => {
      if (notification.jobName === BACKFILL_WAKE) return backfillRunner.claimNow();
      const due = notification.nextRunAt;
      if (!due || new Date(due).getTime() <= this.#clock.now() + runs.lookAheadMs) runs.claimNow();
    });
    return {
      agenda,
      locks,
      gate,
      recorder,
      dependencies,
      channel,
      repository,
      runs,
      liveness: this.#liveness(),
      // while pause-all is on every slot falls due unrun on purpose: not a silent stop to report
      missedSlots: this.#missedSlotDetector(() => (gate.paused ? [] : [...runs.definedTasks])),
      ...this.#writeParts(agenda, dependencies),
      backfillRunner,
    };
  }

  /** The job rows' writes: one row at a time, and many at once for the reconciler. */
  #writeParts(agenda: Agenda, dependencies: TaskDependencies): Pick<EngineParts, "writes" | "batchWrites"> {
    const { pool, instanceId } = this.#options;
    const common = {
      pool,
      agenda,
      instanceId,
      clock: this.#clock,
      wake: (job: WakeJob) => this.#ctx.wake(job),
    };
    return { writes: new JobWrites({ ...common, dependencies }), batchWrites: new JobBatchWrites(common) };
  }

  /** The namespace's pause-all switch, heard on the notification channel. */
  #pauseGate(channel: JobNotificationChannel): PauseGate {
    const gate = new PauseGate({
      pool: this.#options.pool,
      namespace: this.#options.namespace ?? "default",
      logger: this.#logger,
      onLifted: () => this.#ctx.parts()?.runs.claimNow(),
    });
    channel.alsoListen(gate.channel());
    return gate;
  }

  #backfillRunner({
    agenda,
    runs,
    recorder,
    dependencies,
    locks,
    paused,
  }: {
    agenda: Agenda;
    runs: ClaimedRuns;
    recorder: RunRecorder;
    dependencies: TaskDependencies;
    locks: LockKeeper;
    paused: () => boolean;
  }): BackfillRunner {
    const { pool, instanceId, lockLifetimeMs, processEveryMs } = this.#options;
    if (!this.#runnerDeps) throw new Error("the run ports must be built before the backfill runner");
    return new BackfillRunner({
      paused,
      pool,
      agenda,
      instanceId,
      logger: this.#logger,
      clock: this.#clock,
      lockLifetimeMs,
      pollEveryMs: Math.min(processEveryMs, 1_000),
      locks,
      runnerDeps: this.#runnerDeps,
      recorder,
      definition: (name) => runs.definitionOf(name),
      definedTasks: () => runs.definedTasks,
      dependencies,
    });
  }

  /** Task dependencies as the options build them (src/dependencies/), woken through this engine. */
  #dependencies(): TaskDependencies {
    const build = this.#options.dependencies;
    if (!build) return noDependencies(this.#options.pool);
    return build({
      wake: (rows) => {
        this.#ctx.parts()?.runs.claimNow();
        for (const row of rows)
          void this.#ctx
            .wake({ id: row.id, name: row.name, nextRunAt: row.next_run_at, priority: 0 })
            .catch(() => {});
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
      onRowGivenBack: () => this.#ctx.parts()?.runs.claimNow(),
      onHandedOff: (jobId, taskName) => {
        // the other instances lock it now, not at their next poll
        void this.#ctx
          .wake({
            id: jobId,
            name: taskName,
            nextRunAt: new Date(this.#clock.now()),
            priority: 0,
          })
          .catch(() => {});
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
  #runPorts({
    repository,
    recorder,
    dependencies,
    tracer,
    locks,
    paused,
  }: {
    repository: CronwardenJobRepository;
    recorder: RunRecorder;
    dependencies: TaskDependencies;
    tracer: RunTracer;
    locks: LockKeeper;
    paused: () => boolean;
  }): SlotRunnerPorts {
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
    this.#runnerDeps = {
      watchdog: locks,
      recorder,
      logger,
      hooks: runHooks,
      checks: new RunChecks({ pool, logger, lockLifetimeMs, clock, skipped, dependencies, paused }),
      skipped,
      timeoutGraceMs: this.#options.timeoutGraceMs ?? DEFAULT_TIMEOUT_GRACE_MS,
      lockLifetimeMs,
      clock,
      startAheadMs: startAheadOf(lockLifetimeMs),
      tracer,
    };
    const runner = new TaskRunner(this.#runnerDeps);
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
      clock: this.#clock,
      details: {
        host: this.#options.describe?.host ?? "",
        version: this.#options.describe?.version ?? "",
        startedAt: new Date(this.#clock.now()),
        concurrency: this.#options.maxConcurrency ?? DEFAULT_MAX_CONCURRENCY,
      },
      // the check's answer is the health probe's; a failed check asks the pool at once
      onChecked: (answered) => {
        if (answered) this.#health.confirmUp();
        else void this.#health.probe();
      },
      // a session cut by the server (a restart, a failover, a switchover): expired locks say
      // nothing about their owners until they could renew on the new server
      onSessionInterrupted: () => this.#ctx.parts()?.repository.holdTakeovers(this.#options.lockLifetimeMs),
      onReleased: (rows) => {
        this.#ctx.parts()?.runs.claimNow();
        const soon = this.#clock.now() + processEveryMs;
        for (const row of rows)
          if (row.next_run_at && row.next_run_at.getTime() <= soon)
            void this.#ctx
              .wake({
                id: row.id,
                name: row.name,
                nextRunAt: row.next_run_at,
                priority: row.priority,
              })
              .catch(() => {});
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
      clock: this.#clock,
      logger: this.#logger,
      onMissed: (missed) => this.#options.hooks?.missedSlot?.(missed),
      nudge: (row) =>
        this.#ctx.wake({ id: row.id, name: row.name, nextRunAt: row.next_run_at, priority: row.priority }),
      repairLostNextRun: async () => this.#options.repairLostNextRun?.(),
    });
  }
}

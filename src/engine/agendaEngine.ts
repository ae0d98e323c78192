import { setTimeout as sleep } from "node:timers/promises";
import { PostgresJobLogger } from "@agendajs/postgres-backend";
import { Agenda, type AgendaBackend, Job, type JobId } from "agenda";
import type { PoolClient } from "pg";
import { type Clock, systemClock } from "../core/clock.js";
import { SCHEDULER_DEFAULTS } from "../core/defaults.js";
import type { Logger } from "../core/logger.js";
import { POLL_PHASES } from "../core/periodic.js";
import type { CatchUpPolicy } from "../core/policies/catchUp.js";
import { POLICY_DATA_KEY } from "../core/policies/catchUpAtStart.js";
import { dueAt } from "../core/policies/jitter.js";
import type { OverlapPolicy } from "../core/policies/overlap.js";
import { type PauseMark, pauseOfValue } from "../core/policies/pauseOnFailure.js";
import { nextSlot, rowSchedule, scheduleOf } from "../core/policies/schedule.js";
import { guardHooks, ListenerFailures } from "../core/safeEmit.js";
import { withAdvisoryTryLock } from "./advisoryLock.js";
import { type ClaimedJob, ClaimLoop, type RunTurn } from "./claimLoop.js";
import { DatabaseHealth } from "./databaseHealth.js";
import { cacheDebugColors } from "./debugColors.js";
import { DependencyCoordinator } from "./dependencies.js";
import type {
  ChainSlot,
  DependencySpec,
  DrainOutcome,
  EngineOptions,
  EngineRun,
  RunHandler,
  RunRecord,
  RunSummary,
  TaskDefinitionOptions,
  TaskJob,
} from "./engineApi.js";
import { readRunSummaries, readTaskJobs, runRecordOfRow } from "./jobReads.js";
import { type ClaimedRow, CronwardenJobRepository } from "./jobRepository.js";
import { InstanceLiveness } from "./liveness.js";
import { MissedSlotDetector } from "./missedSlotDetector.js";
import { NextRunAhead } from "./nextRunAhead.js";
import { JobNotificationChannel } from "./notificationChannel.js";
import { RunChecks } from "./runChecks.js";
import { RunRecorder } from "./runRecorder.js";
import { checkSchema, migrateSchema } from "./schema.js";
import { SkippedSlots } from "./skippedSlots.js";
import type { SlotRun } from "./slotRun.js";
import { SlotRunner, type SlotRunnerPorts, type TaskDefinition } from "./slotRunner.js";
import * as sql from "./sql.js";
import { DatabaseUnreachableBeforeStartError, STALE_START_MESSAGE, StaleStartError } from "./staleStart.js";
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
 * Jobs held at once (claimed ahead of their slot or waiting for a worker, plus running), per
 * worker. Without a bound one instance would lock a whole herd at the poll before its slot while
 * the others idle; the rest are claimed as runs end (src/engine/claimLoop.ts).
 */
const HELD_LOCKS_PER_WORKER = 2;
/**
 * Before the first handler starts, and with handlers that turn over fast (src/engine/claimLoop.ts
 * #claimLimit), up to this many, and no more than the instance's share of a herd. A job claimed
 * after its slot waits for a claim and a start save before its handler, so this bounds how much of
 * a herd is prepared before its slot: high enough that an instance's share of a large herd is
 * claimed and start-saved ahead of the slot in one go (docs/design.md, "The claim loop").
 */
const MOST_HELD_LOCKS_PER_WORKER = 200;
/** At most this long before its slot a run is handed over (see startAheadOf). */
const START_AHEAD_MS = 1_500;
/** Another instance's reconcile holds the lock: asked again after this, doubling up to the max. */
const RECONCILE_LOCK_RETRY_MS = 25;
const RECONCILE_LOCK_RETRY_MAX_MS = 250;

/** A claimed job: its run, and Agenda's Job object (the job document and Agenda's next-run computation). */
interface EngineClaim extends ClaimedJob {
  readonly job: Job;
  readonly run: SlotRun;
}

/** After the drain deadline, how long cut-off runs get to stop and hand their slot off. */
const HANDOFF_WAIT_MS = 5_000;

/**
 * The notification channel's longest wait between reconnects while the database is down
 * (src/engine/notificationChannel.ts): at most a poll, past which the claim loop's own pass has
 * looked for what a lost notification would have woken it for.
 */
const channelReconnectMaxMs = (processEveryMs: number) => Math.max(1_000, processEveryMs);

/** Agenda 'error' events repeat on every poll while the database is down: log each message once per window. */
const ERROR_LOG_WINDOW_MS = 30_000;

export class AgendaEngine {
  readonly #options: EngineOptions;
  readonly #logger: Logger;
  readonly #clock: Clock;
  /** The runs going on this instance, each with its owner: the drain cuts them off at its deadline. */
  readonly #runs = new Set<SlotRunner>();
  readonly #definedTasks: string[] = [];
  /** Each defined task's handler and options. */
  readonly #definitions = new Map<string, TaskDefinition>();
  #ports: SlotRunnerPorts | undefined;
  /**
   * Names of jobs a claim pass found that this instance does not define (another service's, or a
   * task only a newer release has): given back once, then left alone by every pass.
   */
  readonly #foreignNames = new Set<string>();
  readonly #lastErrorLog = new Map<string, number>();
  readonly #health: DatabaseHealth;
  #missedSlots: MissedSlotDetector | undefined;
  #liveness: InstanceLiveness | undefined;
  #dependencies: DependencyCoordinator | undefined;
  #repository: CronwardenJobRepository | undefined;
  #agenda: Agenda | undefined;
  #recorder: RunRecorder | undefined;
  #channel: JobNotificationChannel | undefined;
  #loop: ClaimLoop<EngineClaim> | undefined;
  #started = false;
  /** Drained: errors of components still closing (a LISTEN connection ended late) are not news. */
  #drained = false;

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
        if (up) this.#repository?.holdTakeovers(options.lockLifetimeMs);
      },
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
   * checks that it is current; then creates the Agenda instance.
   */
  async prepare(): Promise<void> {
    if (this.#agenda) return;
    const { pool, instanceId, processEveryMs, lockLifetimeMs } = this.#options;
    if (this.#options.migrate === false) {
      const state = await checkSchema(pool);
      this.#logger.info({ schemaVersion: state.version }, "schema is current (schema changes are off)");
    } else {
      const migrated = await migrateSchema(pool);
      if (migrated.from !== migrated.to)
        this.#logger.info(
          { from: migrated.from, to: migrated.to },
          `schema migrated from version ${migrated.from ?? "(none)"} to ${migrated.to}`,
        );
    }
    const jobLogger = new PostgresJobLogger({ pool, tableName: sql.LOGS_TABLE, ensureSchema: false });
    this.#recorder = new RunRecorder(
      jobLogger,
      instanceId,
      this.#logger,
      new StatementBatch((rows) => sql.insertRunLogRows(pool, rows).then(() => rows.map(() => undefined))),
      this.#clock,
    );
    const hooks = this.#options.hooks ?? {};
    const dependencies = new DependencyCoordinator({
      pool,
      instanceId,
      logger: this.#logger,
      hooks,
      sweepEveryMs: this.#options.dependencySweepMs,
      sweepPhaseMs: POLL_PHASES.dependencySweep * processEveryMs,
      wake: (rows) => {
        this.#loop?.claimNow();
        for (const row of rows)
          void this.#wake({ id: row.id, name: row.name, nextRunAt: row.next_run_at, priority: 0 }).catch(
            () => {},
          );
      },
    });
    this.#dependencies = dependencies;
    this.#recorder.onOutcome = (taskName, meta) => dependencies.outcomeRecorded(taskName, meta);
    const notificationChannel = new JobNotificationChannel({
      pool,
      reconnect: { enabled: true, maxDelayMs: channelReconnectMaxMs(processEveryMs) },
    });
    // The channel is an EventEmitter that emits 'error' when its LISTEN connection drops (a
    // database restart); without a listener that is an uncaught exception. It reconnects itself.
    notificationChannel.on("error", (error: Error) => this.#logAgendaError(error, "notification channel"));
    const repository = new CronwardenJobRepository(pool, this.#logger, {
      lockLifetimeMs,
      clock: this.#clock,
      onRowGivenBack: () => this.#loop?.claimNow(),
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
    this.#repository = repository;
    this.#channel = notificationChannel;
    const livenessCheckMs = this.#options.livenessCheckMs ?? DEFAULT_LIVENESS_CHECK_MS;
    if (livenessCheckMs > 0)
      this.#liveness = new InstanceLiveness({
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
          this.#loop?.claimNow();
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
    const startAheadMs = startAheadOf(lockLifetimeMs);
    const lookAheadMs = lookAheadOf(processEveryMs, startAheadMs);
    notificationChannel.subscribe((notification) => {
      const due = notification.nextRunAt;
      if (!due || new Date(due).getTime() <= this.#clock() + lookAheadMs) this.#loop?.claimNow();
    });
    const runnerHooks = {
      ...hooks,
      runStarted: (run: EngineRun) => {
        hooks.runStarted?.(run);
        dependencies.runStarted(run);
      },
    };
    const skipped = new SkippedSlots({
      recorder: this.#recorder,
      logger: this.#logger,
      hooks: runnerHooks,
      clock: this.#clock,
    });
    const runner = new TaskRunner({
      watchdog: new Watchdog({
        renewer: repository,
        lockLifetimeMs,
        logger: this.#logger,
        now: () => new Date(this.#clock()),
      }),
      recorder: this.#recorder,
      logger: this.#logger,
      hooks: runnerHooks,
      checks: new RunChecks({
        pool,
        logger: this.#logger,
        lockLifetimeMs,
        clock: this.#clock,
        skipped,
        dependencies,
      }),
      skipped,
      timeoutGraceMs: this.#options.timeoutGraceMs ?? DEFAULT_TIMEOUT_GRACE_MS,
      lockLifetimeMs,
      clock: this.#clock,
      startAheadMs,
    });
    this.#ports = {
      rows: repository,
      recorder: this.#recorder,
      runner,
      logger: this.#logger,
      clock: this.#clock,
      instanceId,
    };
    const backend: AgendaBackend = {
      name: "PostgreSQL (cronwarden)",
      repository,
      notificationChannel,
      logger: jobLogger,
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
      maxConcurrency: this.#options.maxConcurrency ?? DEFAULT_MAX_CONCURRENCY,
      logging: true,
    });
    agenda.on("error", (error: Error) => this.#onRunError(error));
    await agenda.ready;
    this.#agenda = agenda;
    const maxConcurrency = this.#options.maxConcurrency ?? DEFAULT_MAX_CONCURRENCY;
    const nextRunAhead = new NextRunAhead();
    this.#loop = new ClaimLoop<EngineClaim>({
      processEveryMs,
      lookAheadMs,
      startAheadMs,
      maxConcurrency,
      baseClaimed: HELD_LOCKS_PER_WORKER * maxConcurrency,
      maxClaimed: MOST_HELD_LOCKS_PER_WORKER * maxConcurrency,
      lockLifetimeMs,
      now: this.#clock,
      claim: async (request) => {
        const jobs = await repository.claimDue({
          until: request.until,
          limit: request.limit,
          ...(request.share ? { share: request.share } : {}),
          now: request.now,
          names: null,
          skip: this.#foreignNames.size === 0 ? request.holding : [...request.holding, ...this.#foreignNames],
          owner: instanceId,
          runsHere: (name) => this.#definitions.has(name),
          givenBack: (job) => {
            this.#foreignNames.add(job.name);
            void this.#wake({
              id: String(job._id),
              name: job.name,
              nextRunAt: job.nextRunAt ?? null,
              priority: job.priority ?? 0,
            }).catch((error: unknown) =>
              this.#logger.debug({ err: error }, "could not wake the owner of a job given back"),
            );
          },
        });
        return jobs.map((row) => this.#engineClaim(agenda, nextRunAhead, row, request.now));
      },
      run: (claimed, turn) => this.#execute(claimed, turn),
      release: (claimed) => repository.release(claimed.run),
      onStale: (claimed, waitedFor) => {
        if (waitedFor === "worker") {
          this.#logStaleStart(new StaleStartError(claimed.name));
          return;
        }
        // a poll longer than the lock lifetime claims a slot earlier than its lock lasts: not a
        // sign of overload, and the loop claims the job again at once
        this.#logger.debug(
          { task: claimed.name, lockLifetimeMs, processEveryMs },
          "a job claimed ahead of its slot outlived its lock; claiming it again",
        );
      },
      onError: (error) => {
        this.#onRunError(error instanceof Error ? error : new Error(String(error)));
      },
    });
    this.#missedSlots = new MissedSlotDetector({
      pool,
      taskNames: () => this.#definedTasks,
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

  /**
   * Defines the Agenda job for a task; `handler` runs once per slot this instance claims. One job
   * row per task, its lock, and the claim loop leaving alone the names it holds keep a task to one
   * run at a time.
   */
  defineTask(taskName: string, handler: RunHandler, options: TaskDefinitionOptions = {}): void {
    if (!this.#ports) throw new Error("AgendaEngine.prepare() must complete first");
    this.#definedTasks.push(taskName);
    this.#definitions.set(taskName, { handler, options });
    this.#foreignNames.delete(taskName);
    const agenda = this.#requireAgenda();
    // Agenda's definition names the job for Agenda's own tools; the engine runs it (SlotRunner),
    // never Agenda. Every task shares the first one: define() builds an object per name and
    // captures a stack trace for its filePath (about 90 bytes a task kept).
    const first = this.#definedTasks[0];
    const shared = first === undefined ? undefined : agenda.definitions[first];
    if (shared && shared.fn === notRunByAgenda) agenda.definitions[taskName] = shared;
    else agenda.define(taskName, notRunByAgenda, { concurrency: 1 });
  }

  /** A claimed job, its run made by the claim; a run handed over before its slot starts its handler at the slot. */
  #engineClaim(agenda: Agenda, nextRunAhead: NextRunAhead, row: ClaimedRow, now: Date): EngineClaim {
    const { job: attrs, run } = row;
    const claimed: EngineClaim = {
      id: run.jobId,
      name: attrs.name,
      dueAt: Math.max(attrs.nextRunAt?.getTime() ?? now.getTime(), now.getTime()),
      lockedAt: (attrs.lockedAt ?? now).getTime(),
      job: new Job(agenda, attrs, true),
      run,
    };
    nextRunAhead.prepare(claimed.job, claimed.dueAt);
    if (claimed.dueAt > now.getTime()) run.startsAt(new Date(claimed.dueAt));
    if (attrs.nextRunAt) this.#options.hooks?.slotLocked?.(attrs.name, attrs.nextRunAt);
    return claimed;
  }

  /** Hands a claimed job to its run's owner, which runs it from the start save to the final save. */
  async #execute(claimed: EngineClaim, turn: RunTurn): Promise<void> {
    const definition = this.#definitions.get(claimed.name);
    if (!definition || !this.#ports) throw new Error(`no task "${claimed.name}" is defined here`);
    const owner = new SlotRunner(claimed.run, claimed.job, definition, this.#ports);
    this.#runs.add(owner);
    try {
      await owner.execute(turn);
    } finally {
      this.#runs.delete(owner);
    }
  }

  async start(): Promise<void> {
    // A new instance cannot tell a lock whose owner died from one whose owner could not renew it
    // through a database outage this instance did not see: it takes nothing over for one lifetime.
    this.#repository?.holdTakeovers(this.#options.lockLifetimeMs);
    this.#drained = false;
    // live before the first lock: a lock under this id must never look like a dead instance's
    await this.#liveness?.start();
    this.#requireAgenda();
    await this.#channel?.connect();
    this.#loop?.start();
    this.#health.start();
    this.#missedSlots?.start();
    this.#dependencies?.start();
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
    if (!agenda || !this.#started) {
      // a start that failed at its channel's connect left the channel reconnecting
      await this.#channel?.disconnect().catch(() => {});
      await this.#liveness?.stop();
      return { completed: 0, handedOff: [], abandoned: [] };
    }
    this.#started = false;
    this.#drained = true;
    await this.#health.stop();
    await this.#missedSlots?.stop();
    const result = (await this.#loop?.drain(timeoutMs)) ?? { completed: 0, running: 0 };
    // Runs still going are cut off and handed off: recorded interrupted, their slot released for
    // the other instances to re-run at once (CronwardenJobRepository), instead of failing them.
    const cutOff = [...this.#runs];
    for (const owner of cutOff) owner.cutOff();
    const waitUntil = Date.now() + HANDOFF_WAIT_MS;
    while ((this.#runs.size > 0 || (this.#repository?.pendingEnds ?? 0) > 0) && Date.now() < waitUntil) {
      await sleep(50);
    }
    await this.#dependencies?.stop();
    await this.#channel?.disconnect().catch(() => {});
    const abandoned = [...this.#runs].map((owner) => owner.run.taskName);
    const handedOff = cutOff.map((owner) => owner.run.taskName).filter((name) => !abandoned.includes(name));
    await this.#recorder?.flush();
    // last: until here a crash is not a clean stop (runs still saving their end)
    await this.#liveness?.stop();
    return { completed: result.completed, handedOff, abandoned };
  }

  async listJobs(): Promise<TaskJob[]> {
    return readTaskJobs(this.#options.pool);
  }

  /** A digest of what the reconcile planner reads of the job rows (sql/jobs.ts). */
  plannedColumnsDigest(): Promise<string> {
    return sql.selectPlannedColumnsDigest(this.#options.pool);
  }

  /**
   * Creates the repeating `single` job of a task; its first run is the next slot after now. A
   * downstream's job (`after`) has no schedule: its runs are queued by its upstreams.
   */
  async createJob(
    taskName: string,
    cron: string,
    timezone: string,
    enabled: boolean,
    after?: DependencySpec,
  ): Promise<void> {
    const agenda = this.#requireAgenda();
    const job = after ? agenda.create(taskName, { after }) : agenda.create(taskName);
    job.attrs.type = "single";
    if (after) job.attrs.nextRunAt = null;
    else {
      const schedule = scheduleOf(cron);
      if (schedule.kind === "at") {
        // a one-shot: no repeat interval, so Agenda runs it once and leaves no next run
        job.attrs.nextRunAt = new Date(schedule.at);
        job.attrs.repeatTimezone = timezone;
        (job.attrs as { data: unknown }).data = {
          [POLICY_DATA_KEY]: { at: new Date(schedule.at).toISOString() },
        };
        if (!enabled) job.disable();
        await job.save();
        return;
      }
      repeatFrom(job, cron, timezone, new Date(this.#clock()));
    }
    if (!enabled) job.disable();
    await job.save();
    if (after) await this.setDependency(taskName, after); // a row that existed already is converted too
  }

  /** Makes a task's row a downstream with `after`, or a plain row again (null); see DependencyCoordinator. */
  async setDependency(taskName: string, after: DependencySpec | null): Promise<void> {
    await this.#requireDependencies().setDependency(taskName, after);
  }

  /** Per slot, the state of each downstream's wait for its upstreams, newest first. */
  async chains(query: { tasks?: string[]; limit: number }): Promise<ChainSlot[]> {
    return this.#requireDependencies().chains(query);
  }

  /** Runs the dependency sweeper now (tests; it also runs every second). */
  sweepDependencies(): Promise<void> {
    return this.#requireDependencies().sweep();
  }

  #requireDependencies(): DependencyCoordinator {
    if (!this.#dependencies) throw new Error("AgendaEngine.prepare() must complete first");
    return this.#dependencies;
  }

  /**
   * Changes cron and timezone in place (same row, lock and history). The next run is computed
   * from `now` in the new timezone, by Agenda's own algorithm, and written with the schedule in
   * one statement. Not `repeatEvery()` + `save()`: that computes from the last run (a time that
   * can be past, firing at once) and `save()` clears the failure fields. A run that started after
   * `now` moves the reference to its start: its slot is not the next one (src/engine/sql/jobs.ts
   * updateSchedule).
   */
  async updateSchedule(taskName: string, cron: string, timezone: string, now: Date): Promise<Date> {
    let reference = now;
    const schedule = scheduleOf(cron);
    if (schedule.kind === "at") {
      // (re-)arms a one-shot: it runs once more, at its new time
      const at = new Date(schedule.at);
      await sql.armOneShot(this.#options.pool, { name: taskName, timezone, at });
      return at;
    }
    for (let attempt = 1; ; attempt++) {
      const probe = this.#requireAgenda().create(taskName);
      probe.attrs.lastRunAt = reference; // the reference Agenda's computation starts from
      repeatFrom(probe, cron, timezone, reference);
      const nextRunAt = probe.attrs.nextRunAt;
      if (!nextRunAt)
        throw new Error(`cron "${cron}" in ${timezone} has no next run after ${reference.toISOString()}`);
      const result = await sql.updateSchedule(this.#options.pool, {
        name: taskName,
        cron,
        timezone,
        nextRunAt,
        reference,
      });
      if (result.updated || !result.exists) return nextRunAt;
      if (attempt >= 5 || !result.startedAt)
        throw new Error(`the schedule of "${taskName}" could not be changed: runs kept starting meanwhile`);
      reference = new Date(Math.max(result.startedAt.getTime(), reference.getTime()));
    }
  }

  async setPolicy(taskName: string, catchUp: CatchUpPolicy): Promise<void> {
    await sql.setPolicy(this.#options.pool, taskName, { catchUp });
  }

  /**
   * Stores a task's jitter; an idle job whose next run is ahead is re-timed to its next slot plus
   * the new offset (a running or pre-locked one takes it from its next start save).
   */
  async setJitter(taskName: string, jitterMs: number, now: Date): Promise<void> {
    await sql.setPolicy(this.#options.pool, taskName, { jitterMs });
    const row = (await sql.selectTaskJobs(this.#options.pool)).find((job) => job.name === taskName);
    const schedule = row ? rowSchedule(row.repeat_interval, row.policy) : null;
    if (!row || !schedule || row.locked_at || !row.next_run_at || row.next_run_at <= now) return;
    const slot = nextSlot(schedule, row.repeat_timezone ?? "UTC", now.getTime());
    if (slot === undefined) return;
    await sql.retimeIdle(
      this.#options.pool,
      taskName,
      row.next_run_at,
      new Date(dueAt(taskName, slot, jitterMs)),
    );
  }

  async setOverlap(taskName: string, overlap: OverlapPolicy): Promise<void> {
    await sql.setPolicy(this.#options.pool, taskName, { overlap });
  }

  async setEnabled(taskName: string, enabled: boolean): Promise<void> {
    await sql.setDisabled(this.#options.pool, taskName, !enabled);
  }

  /** Stores a task's pauseOnFailure (null: never pauses) in its job row (read by each slot's end). */
  async setPauseOnFailure(taskName: string, pauseOnFailure: number | null): Promise<void> {
    await sql.setPolicy(this.#options.pool, taskName, { pauseOnFailure });
  }

  /**
   * Clears a pause by failure: the task is enabled again (or stays disabled: `enabled` false) and
   * its failure streak starts over; like an enable, its next run follows catchUp at its start.
   * `record` runs in the same transaction once a pause was cleared (the audit row). "not-paused"
   * when the task has a job that is not paused, "missing" when it has none.
   */
  async resume(
    taskName: string,
    enabled: boolean,
    record?: (db: PoolClient, pause: PauseMark) => Promise<void>,
  ): Promise<
    { status: "resumed"; pause: PauseMark; nextRunAt: Date | null } | { status: "not-paused" | "missing" }
  > {
    const { cleared, pause } = await sql.inTransaction(this.#options.pool, async (client) => {
      const row = await sql.clearPause(client, taskName, enabled);
      const mark = row ? (pauseOfValue(row.paused) ?? undefined) : undefined;
      if (row && mark) await record?.(client, mark);
      return { cleared: row, pause: mark };
    });
    if (cleared && pause) {
      if (enabled && cleared.next_run_at)
        await this.#wake({
          id: cleared.id,
          name: taskName,
          nextRunAt: cleared.next_run_at,
          priority: 0,
        }).catch(() => {});
      return { status: "resumed", pause, nextRunAt: cleared.next_run_at };
    }
    const flags = await sql.selectJobFlags(this.#options.pool, taskName);
    return { status: flags ? "not-paused" : "missing" };
  }

  /** Runs `work` while holding a database-wide lock, so instances reconcile one at a time. */
  async withReconcileLock<T>(work: () => Promise<T>): Promise<T> {
    // waits without holding a connection: the holder's work takes more connections from the
    // pool, and reconciles waiting on connections of the same pool (several schedulers on one
    // pool, or a config change, a repair and an anti-entropy pass at once) could leave it none
    for (let attempt = 0; ; attempt++) {
      const client = await this.#options.pool.connect();
      let outcome: { acquired: true; value: T } | { acquired: false };
      try {
        outcome = await withAdvisoryTryLock(client, sql.RECONCILE_LOCK_KEY, work);
      } finally {
        client.release();
      }
      if (outcome.acquired) return outcome.value;
      await sleep(Math.min(RECONCILE_LOCK_RETRY_MS * 2 ** attempt, RECONCILE_LOCK_RETRY_MAX_MS));
    }
  }

  /** Finished runs of a task, newest first, from Agenda's run log. */
  async listRuns(taskName: string, limit = 50): Promise<RunRecord[]> {
    const rows = await sql.selectRuns(this.#options.pool, taskName, limit);
    return rows.map(runRecordOfRow);
  }

  /**
   * Asks for a run now; refused while a run holds the lock or the task is disabled. `record`
   * runs in the same transaction as the request, once it is accepted (the audit row): both are
   * written or neither.
   */
  async requestRun(
    taskName: string,
    requestedBy: string,
    record?: (db: PoolClient) => Promise<void>,
    options: { withDownstream?: boolean } = {},
  ): Promise<"queued" | "running" | "disabled" | "missing"> {
    const queued = await sql.inTransaction(this.#options.pool, async (client) => {
      const request = await sql.requestManualRun(client, taskName, {
        by: requestedBy,
        instance: this.instanceId,
        withDownstream: options.withDownstream === true,
      });
      if (request) await record?.(client);
      return request;
    });
    if (queued) {
      await this.#wake({ id: queued.id, name: taskName, nextRunAt: queued.next_run_at, priority: 0 });
      return "queued";
    }
    const flags = await sql.selectJobFlags(this.#options.pool, taskName);
    if (!flags) return "missing";
    return flags.disabled ? "disabled" : "running";
  }

  /** Latest outcome, error, start instance and recent outcomes of every task, for status listings. */
  runSummaries(recent = RECENT_OUTCOMES): Promise<RunSummary[]> {
    return readRunSummaries(this.#options.pool, recent);
  }

  /** Deletes run-log rows older than `before` (one instance at a time); null when another instance is at it. */
  pruneRunLog(before: Date): Promise<number | null> {
    return sql.pruneRunLog(this.#options.pool, before);
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
    if (!this.#missedSlots) throw new Error("AgendaEngine.prepare() must complete first");
    return this.#missedSlots.check();
  }

  /** A claim pass or a run's start failed (the loop goes on). */
  #onRunError(error: Error): void {
    if (error instanceof StaleStartError) this.#logStaleStart(error);
    else if (error instanceof DatabaseUnreachableBeforeStartError) this.#logOncePerWindow("warn", error);
    else this.#logAgendaError(error);
  }

  /** A queued run lost its lock before a worker was free: the instance is behind its due runs. */
  #logStaleStart(error: StaleStartError): void {
    const now = Date.now();
    const last = this.#lastErrorLog.get(STALE_START_MESSAGE);
    if (last !== undefined && now - last < ERROR_LOG_WINDOW_MS) return;
    this.#lastErrorLog.set(STALE_START_MESSAGE, now);
    this.#logger.warn(
      { err: error, maxConcurrency: this.#options.maxConcurrency ?? DEFAULT_MAX_CONCURRENCY },
      `a due run waited longer than its lock lifetime for a free worker and was locked again (${error.message}); more due runs than this instance starts in a lock lifetime: raise maxConcurrency or add instances`,
    );
  }

  #logOncePerWindow(level: "warn" | "error", error: Error): void {
    const key = error.name;
    const now = Date.now();
    const last = this.#lastErrorLog.get(key);
    if (last !== undefined && now - last < ERROR_LOG_WINDOW_MS) return;
    this.#lastErrorLog.set(key, now);
    this.#logger[level]({ err: error }, error.message);
  }

  /**
   * Agenda reports database trouble on every poll of every job name. While the health probe
   * says the database is down, those reports add nothing to its one outage line: debug only.
   */
  #logAgendaError(error: Error, origin = "agenda"): void {
    const message = `${origin}: ${error.message}`;
    void this.#health.probe().then((up) => {
      if (!up || this.#drained) {
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

  /** Wakes the workers of every instance for a job that is due now (PostgreSQL NOTIFY). */
  async #wake(job: { id: string; name: string; nextRunAt: Date | null; priority: number }): Promise<void> {
    const agenda = this.#requireAgenda();
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

  #requireAgenda(): Agenda {
    if (!this.#agenda) throw new Error("AgendaEngine.prepare() must complete first");
    return this.#agenda;
  }
}

/** The processor of Agenda's definitions: Agenda never runs a job here (the claim loop and SlotRunner do). */
function notRunByAgenda(): Promise<void> {
  return Promise.reject(
    new Error(
      "cronwarden runs its jobs itself (src/engine/slotRunner.ts); Agenda's processor is not started",
    ),
  );
}

/**
 * What Agenda's `repeatEvery()` sets (the interval and timezone), with the next run: the next slot
 * after `after` (nextSlotAfter), and Agenda's own computation only when there is none.
 * `repeatEvery()` always computes Agenda's, which was then overwritten: for 10,000 new jobs that
 * was about half a gigabyte of cron-parser and luxon garbage, most of a large start's memory peak
 * (docs/design.md, "Memory").
 */
function repeatFrom(job: Job, cron: string, timezone: string, after: Date): void {
  const next = nextSlotAfter(cron, timezone, after);
  if (!next) {
    job.repeatEvery(cron, { timezone });
    return;
  }
  job.attrs.repeatInterval = cron;
  job.attrs.repeatTimezone = timezone;
  job.attrs.nextRunAt = next;
}

/** The next slot (DST rule, or an epoch-anchored interval: src/core/policies/schedule.ts); undefined: Agenda's stands. */
function nextSlotAfter(cron: string, timezone: string, after: Date): Date | undefined {
  try {
    const next = nextSlot(cron, timezone, after.getTime());
    return next === undefined ? undefined : new Date(next);
  } catch {
    return undefined;
  }
}

/**
 * How far ahead of now a claim pass looks: one poll, plus a margin so that a poll that comes a
 * little late still finds the slots of its interval already claimed (a quarter of a poll, at most a
 * second), and that a job first claimed by a poll is still ahead of its start (twice the
 * start-ahead).
 */
function lookAheadOf(processEveryMs: number, startAheadMs: number): number {
  return processEveryMs + Math.max(Math.min(processEveryMs / 4, 1_000), 2 * startAheadMs);
}

/**
 * How long before its slot a claimed run makes its start save and checks, its handler waiting for
 * the slot (src/engine/claimLoop.ts): long enough for a herd's start saves to be made before its
 * slot, and well inside the lock's lifetime (the lock is renewed by the start save, and next by the
 * watchdog while the run waits for its slot).
 */
function startAheadOf(lockLifetimeMs: number): number {
  return Math.min(START_AHEAD_MS, lockLifetimeMs / 10);
}

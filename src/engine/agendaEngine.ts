import { Job, type JobId } from "agenda";
import { type Clock, clockDate, systemClock } from "../core/clock.js";
import { SCHEDULER_DEFAULTS } from "../core/defaults.js";
import { EventLoopMonitor } from "../core/eventLoopMonitor.js";
import type { Logger } from "../core/logger.js";
import { guardHooks, ListenerFailures } from "../core/safeEmit.js";
import { BACKFILL_WAKE } from "./backfillRunner.js";
import { DatabaseHealth } from "./databaseHealth.js";
import { cacheDebugColors } from "./debugColors.js";
import type {
  ChainSlot,
  DrainOutcome,
  EngineOptions,
  RunHandler,
  TaskDefinitionOptions,
  TaskJob,
} from "./engineApi.js";
import { EngineErrors } from "./engineErrors.js";
import { BACKFILL_WAKE_ID, DEFAULT_MAX_CONCURRENCY, type EngineParts, EngineWiring } from "./engineWiring.js";
import type { JobBatchWrites } from "./jobBatchWrites.js";
import { readTaskJobs } from "./jobReads.js";
import { type JobWrites, type WakeJob, withReconcileLock } from "./jobWrites.js";
import type { PauseGate, PauseState } from "./pauseGate.js";
import { checkSchema, migrateSchema } from "./schema.js";
import { requireSessionPooling } from "./sessionPooling.js";
import * as sql from "./sql.js";

export type * from "./engineApi.js";

/**
 * The only module that knows Agenda, and the engine's lifecycle: prepare (the schema, then the
 * parts of src/engine/engineWiring.ts), start, drain. It owns the Agenda instance on a `pg` Pool
 * it is given (and does not close), defines one Agenda job per task, and offers the scheduler a
 * narrow surface: define, start, drain, read the job rows for the planner, and change them in
 * place (src/engine/jobWrites.ts). The read models read its tables from src/status/.
 */

const DEFAULT_HEALTH_PROBE_MS = SCHEDULER_DEFAULTS.healthProbeMs;
const DEFAULT_STALL_WARN_MS = SCHEDULER_DEFAULTS.stallWarnMs;

export class AgendaEngine {
  readonly #options: EngineOptions;
  readonly #logger: Logger;
  readonly #clock: Clock;
  readonly #errors: EngineErrors;
  readonly #health: DatabaseHealth;
  /** Logs and counts event-loop stalls while started. */
  #stalls: EventLoopMonitor | undefined;
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
      clock: this.#clock,
      onChange: (up) => {
        if (up) this.#parts?.repository.holdTakeovers(options.lockLifetimeMs);
      },
    });
    this.#errors = new EngineErrors({
      logger: this.#logger,
      health: this.#health,
      maxConcurrency: options.maxConcurrency ?? DEFAULT_MAX_CONCURRENCY,
      clock: this.#clock,
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
   * checks that it is current; then builds the engine's parts around one Agenda instance
   * (src/engine/engineWiring.ts).
   */
  async prepare(): Promise<void> {
    if (this.#parts) return;
    await this.#schema();
    this.#parts = await new EngineWiring({
      options: this.#options,
      logger: this.#logger,
      clock: this.#clock,
      errors: this.#errors,
      health: this.#health,
      parts: () => this.#parts,
      wake: (job) => this.#wake(job),
    }).build();
  }

  async #schema(): Promise<void> {
    const { pool } = this.#options;
    // before the schema lock, the first session-level lock this instance takes
    await requireSessionPooling(pool);
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
    parts.locks.start();
    await parts.channel.connect();
    // the switch as it is now, before the first claim (the channel's own read may still be in flight)
    await parts.gate.refresh();
    parts.runs.start();
    this.#health.start();
    parts.missedSlots.start();
    parts.dependencies.start();
    parts.backfillRunner.start();
    this.#watchStalls(parts.runs);
    this.#started = true;
    this.#logger.info(
      { processEveryMs: this.#options.processEveryMs, lockLifetimeMs: this.#options.lockLifetimeMs },
      "engine started: polling for due runs",
    );
  }

  /**
   * Each stall of the event loop (a handler's synchronous work, on the main thread) is logged once,
   * with its length and the runs going, when it ends. The runs' locks are kept meanwhile by the
   * lock keeper's thread (src/engine/lockKeeper.ts), but nothing else runs on this instance.
   */
  #watchStalls(runs: EngineParts["runs"]): void {
    const stallMs = this.#options.stallWarnMs ?? DEFAULT_STALL_WARN_MS;
    if (stallMs <= 0) return;
    this.#stalls?.close();
    this.#stalls = new EventLoopMonitor({
      stallMs,
      onStall: ({ durationMs }) => {
        const runningTasks = runs.runningTasks();
        this.#logger.warn(
          { durationMs, runningTasks },
          `event loop blocked for ${(durationMs / 1000).toFixed(1)} s${runningTasks.length > 0 ? ` while running ${[...new Set(runningTasks)].join(", ")}` : ""}: nothing else ran on this instance meanwhile; a handler doing synchronous work should run with isolation "worker" or "process" (docs/locks-and-failover.md, "Busy is not dead")`,
        );
        this.#options.hooks?.eventLoopStalled?.({ durationMs, runningTasks });
      },
    });
  }

  /**
   * Stops taking new runs and waits for running ones up to `timeoutMs`. Runs still going at the
   * deadline are cut off and handed off: recorded interrupted, their slot released for the other
   * instances to re-run at once, instead of failing them (src/engine/claimedRuns.ts). The
   * instance stays registered live until `keepRegisteredUntil` settles as well.
   */
  async drain(
    timeoutMs: number,
    options: { keepRegisteredUntil?: Promise<unknown> } = {},
  ): Promise<DrainOutcome> {
    const parts = this.#parts;
    if (!parts || !this.#started) {
      // a start that failed at its channel's connect left the channel reconnecting
      await parts?.channel.disconnect().catch(() => {});
      await parts?.liveness?.stop();
      return { completed: 0, handedOff: [], abandoned: [] };
    }
    this.#started = false;
    this.#errors.drained = true;
    this.#stalls?.close();
    this.#stalls = undefined;
    await this.#health.stop();
    await parts.missedSlots.stop();
    const [drained] = await Promise.all([parts.runs.drain(timeoutMs), parts.backfillRunner.drain(timeoutMs)]);
    await parts.locks.close();
    await parts.dependencies.stop();
    await parts.channel.disconnect().catch(() => {});
    await parts.recorder.flush();
    // the shards this instance holds end or go back first: registered live until then, none of
    // them is claimed as a dead instance's while it still runs here (src/sharding/shardWorker.ts)
    await options.keepRegisteredUntil?.catch(() => {});
    // last: until here a crash is not a clean stop (runs still saving their end)
    await parts.liveness?.stop();
    return drained;
  }

  async listJobs(): Promise<TaskJob[]> {
    return readTaskJobs(this.#options.pool);
  }

  /** The job rows of these tasks only (a reconcile of a few changed entries). */
  listJobsNamed(names: readonly string[]): Promise<TaskJob[]> {
    return readTaskJobs(this.#options.pool, names);
  }

  /** A digest of what the reconcile planner reads of the job rows (sql/jobs.ts). */
  plannedColumnsDigest(): Promise<string> {
    return sql.selectPlannedColumnsDigest(this.#options.pool);
  }

  /** The digest of the named rows alone, and with `all` of every row too (sql/jobs.ts). */
  plannedDigests(names: readonly string[], all: boolean): Promise<{ all?: string; named: string }> {
    return sql.selectPlannedDigests(this.#options.pool, names, all);
  }

  /** The job rows' writes (src/engine/jobWrites.ts); prepare() makes them. */
  #writes(): JobWrites {
    return this.#require().writes;
  }

  createJob(...args: Parameters<JobWrites["createJob"]>): Promise<void> {
    return this.#writes().createJob(...args);
  }

  /** Many rows in one statement per batch (src/engine/jobBatchWrites.ts): the reconciler's bulk writes. */
  createJobs(...args: Parameters<JobBatchWrites["createJobs"]>): Promise<Set<string>> {
    return this.#require().batchWrites.createJobs(...args);
  }

  updateSchedules(...args: Parameters<JobBatchWrites["updateSchedules"]>): Promise<Map<string, Date>> {
    return this.#require().batchWrites.updateSchedules(...args);
  }

  setEnabledMany(...args: Parameters<JobBatchWrites["setEnabledMany"]>): Promise<void> {
    return this.#require().batchWrites.setEnabledMany(...args);
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

  setExclude(...args: Parameters<JobWrites["setExclude"]>): Promise<void> {
    return this.#writes().setExclude(...args);
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

  /** prepare() has built the engine's parts (the admin API listens before that). */
  get prepared(): boolean {
    return this.#parts !== undefined;
  }

  /** Wakes the workers of every instance for a job made due now (a re-run: src/operations/slotReruns.ts). */
  wake(job: WakeJob): Promise<void> {
    return this.#wake(job);
  }

  /** A backfill was created (src/operations/backfills.ts): every instance claims its first slots now. */
  backfillCreated(): void {
    this.#require().backfillRunner.claimNow();
    void this.#wake({ id: BACKFILL_WAKE_ID, name: BACKFILL_WAKE, nextRunAt: null, priority: 0 }).catch(
      () => {},
    );
  }

  /** Runs `work` while holding a database-wide lock, so instances reconcile one at a time. */
  withReconcileLock<T>(work: () => Promise<T>): Promise<T> {
    return withReconcileLock(this.#options.pool, work, this.#clock);
  }

  /** Per slot, the state of each downstream's wait for its upstreams, newest first. */
  async chains(query: { tasks?: string[]; limit: number }): Promise<ChainSlot[]> {
    return this.#require().dependencies.chains(query);
  }

  /** Runs the dependency sweeper now (tests; it also runs every second). */
  sweepDependencies(): Promise<void> {
    return this.#require().dependencies.sweep();
  }

  /** Deletes run-log rows past the retention (one instance at a time); null when another instance is at it. */
  pruneRunLog(retention: sql.RunLogRetention): Promise<number | null> {
    return sql.pruneRunLog(this.#options.pool, retention);
  }

  /** Creates the run log's partitions for now and the days ahead where missing; how many it created. */
  ensureRunLogPartitions(now: Date): Promise<number> {
    return sql.ensurePartitionsAhead(
      this.#options.pool,
      this.#options.runLogPartitionHours ?? sql.DEFAULT_PARTITION_HOURS,
      now,
    );
  }

  /** The namespace's pause-all switch as this instance knows it; undefined while off. */
  get pauseState(): PauseState | undefined {
    return this.#parts?.gate.state;
  }

  /** Turns the pause-all switch on or off, with its audit entry in the same transaction (src/engine/pauseGate.ts). */
  setPauseAll(...args: Parameters<PauseGate["set"]>): ReturnType<PauseGate["set"]> {
    return this.#require().gate.set(...args);
  }

  /** The registered instances and the deaths recorded since `deathsSince` (GET /instances). */
  async instances(
    deathsSince: Date,
  ): Promise<{ instances: sql.InstanceRow[]; deaths: sql.InstanceDeathRow[] }> {
    const pool = this.#options.pool;
    const [instances, deaths] = await Promise.all([
      sql.selectInstances(pool),
      sql.selectInstanceDeaths(pool, { from: deathsSince, limit: 100 }),
    ]);
    return { instances, deaths };
  }

  /** Instance deaths recorded in [from, to), newest first, at most `limit` (the timeline's marks). */
  instanceDeaths(range: { from: Date; to: Date; limit: number }): Promise<sql.InstanceDeathRow[]> {
    return sql.selectInstanceDeaths(this.#options.pool, range);
  }

  /** Run records matching a search, newest first (src/engine/sql/runSearch.ts). */
  searchRuns(query: sql.RunSearchQuery): Promise<sql.RunSearchRow[]> {
    return sql.searchRunLog(this.#options.pool, query, clockDate(this.#clock));
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

import type { Agenda, Job, JobParameters } from "agenda";
import type { Pool } from "pg";
import type { Clock, ClockTimer } from "../core/clock.js";
import type { Logger } from "../core/logger.js";
import type { RunTurn } from "./claimLoop.js";
import type { PreviousRun } from "./engineApi.js";
import type { LockKeeper } from "./lockKeeper.js";
import type { BeforeHandler } from "./runChecks.js";
import type { RunRecorder } from "./runRecorder.js";
import { SlotRun } from "./slotRun.js";
import { SlotRunner, type SlotRunnerPorts, type TaskDefinition } from "./slotRunner.js";
import type { LockRenewal } from "./sql/claim.js";
import * as sql from "./sql.js";
import { StaleStartError } from "./staleStart.js";
import { TaskRunner, type TaskRunnerDeps } from "./taskRunner.js";

/** At most this many slots claimed by one pass on one instance (the backfill's concurrency caps it too). */
const MAX_PER_PASS = 25;
/**
 * With no backfill running, one plain statement this often (the idle budget: README, "Cheap when
 * idle"); a backfill created on any instance wakes every instance at once (BACKFILL_WAKE).
 */
const IDLE_CHECK_MS = 60_000;
/** The name of the notification a new backfill sends (never a task's: task names start with a letter or digit). */
export const BACKFILL_WAKE = "#backfills";
/** How long a drain waits for cut-off backfill runs to hand their slot back. */
const HANDOFF_WAIT_MS = 3_000;

export interface BackfillRunnerDeps {
  /** The namespace's pause-all switch is on (src/engine/pauseGate.ts): no slot is claimed or started. */
  paused(): boolean;
  pool: Pool;
  agenda: Agenda;
  instanceId: string;
  logger: Logger;
  clock: Clock;
  lockLifetimeMs: number;
  pollEveryMs: number;
  /** Renews the slot rows' locks from the lock keeper's thread, as the live runs' (src/engine/lockKeeper.ts). */
  locks: Pick<LockKeeper, "forRow">;
  /** The live runs' runner parts: a backfill slot's runner is theirs with its own lock and checks. */
  runnerDeps: TaskRunnerDeps;
  recorder: Pick<RunRecorder, "recordOutcome">;
  /** The task's handler and options, when it is defined on this instance. */
  definition(taskName: string): TaskDefinition | undefined;
  definedTasks(): readonly string[];
  /** A backfill asked with its downstreams: each slot's downstreams follow it (docs/dependencies.md). */
  dependencies: {
    beforeRun(
      taskName: string,
      slot: Date,
      options: { withDownstream: boolean; downstream: boolean },
    ): Promise<unknown>;
  };
}

/** One claimed slot of a backfill, with what its run needs. */
interface ClaimedSlot {
  backfill: sql.BackfillRow & { job_id: string | null };
  row: sql.ClaimedSlotRow;
  lockAt: Date;
}

/**
 * Runs backfill slots (docs/operations.md, "Backfill"): each pass claims, for every running
 * backfill of a task defined here, the slots its concurrency leaves room for, in slot order, from
 * the backfill's slots table (src/engine/sql/backfills.ts), never from the task's job row: live
 * slots never wait for a backfill, and a backfill needs no worker of the claim loop. Each slot
 * then takes the same path as a live run (SlotRunner, TaskRunner: run records, retries, timeout,
 * tracing, lock renewal), with its own lock (the slot row's, renewed by the lock keeper's thread)
 * and its own checks: trigger `backfill`, the slot's own `scheduledAt` and run key, and for a slot
 * taken over from a dead instance, whether the dead run had recorded its outcome already.
 */
export class BackfillRunner {
  readonly #deps: BackfillRunnerDeps;
  readonly #owners = new Set<SlotRunner>();
  #timer: ClockTimer | undefined;
  #passing: Promise<void> | undefined;
  #again = false;
  #stopped = true;
  /** The last pass found a running backfill: passes come every poll until none is left. */
  #active = false;

  constructor(deps: BackfillRunnerDeps) {
    this.#deps = deps;
  }

  start(): void {
    this.#stopped = false;
    this.#schedule(0);
  }

  /** A pass now (a backfill created here, a slot ended). */
  claimNow(): void {
    if (this.#stopped) return;
    if (this.#passing) {
      this.#again = true;
      return;
    }
    this.#schedule(0);
  }

  /** Stops claiming; waits for the runs up to `timeoutMs`, then cuts them off (their slot handed back). */
  async drain(timeoutMs: number): Promise<void> {
    const clock = this.#deps.clock;
    this.#stopped = true;
    clock.clearTimeout(this.#timer);
    await this.#passing;
    const until = clock.now() + timeoutMs;
    while (this.#owners.size > 0 && clock.now() < until) await clock.sleep(50);
    for (const owner of this.#owners) owner.cutOff();
    const handOffUntil = clock.now() + HANDOFF_WAIT_MS;
    while (this.#owners.size > 0 && clock.now() < handOffUntil) await clock.sleep(50);
  }

  get running(): number {
    return this.#owners.size;
  }

  #schedule(delayMs: number): void {
    this.#deps.clock.clearTimeout(this.#timer);
    this.#timer = this.#deps.clock.setTimeout(() => {
      this.#passing = this.#pass().finally(() => {
        this.#passing = undefined;
        if (this.#stopped) return;
        const again = this.#again;
        this.#again = false;
        this.#schedule(again ? 0 : this.#active ? this.#deps.pollEveryMs : IDLE_CHECK_MS);
      });
    }, delayMs);
    this.#timer.unref?.();
  }

  async #pass(): Promise<void> {
    const tasks = this.#deps.definedTasks();
    if (tasks.length === 0 || this.#deps.paused()) return;
    let claimed: ClaimedSlot[];
    try {
      this.#active = this.#owners.size > 0 || (await sql.anyRunningBackfill(this.#deps.pool, tasks));
      if (!this.#active) return;
      claimed = await this.#claim(tasks);
    } catch (error) {
      this.#deps.logger.warn({ err: error }, "backfill claim failed; retrying at the next poll");
      return;
    }
    for (const slot of claimed) void this.#runSlot(slot);
  }

  async #claim(tasks: readonly string[]): Promise<ClaimedSlot[]> {
    const { pool, instanceId, clock, lockLifetimeMs } = this.#deps;
    return sql.inTransaction(pool, async (client) => {
      const claimed: ClaimedSlot[] = [];
      for (const backfill of await sql.lockRunningBackfills(client, tasks)) {
        const lockAt = new Date(clock.now());
        const rows = await sql.claimBackfillSlots(client, {
          id: backfill.id,
          concurrency: backfill.concurrency,
          owner: instanceId,
          lockAt,
          deadline: new Date(lockAt.getTime() - lockLifetimeMs),
          max: MAX_PER_PASS,
        });
        for (const row of rows) claimed.push({ backfill, row, lockAt });
        if (rows.length === 0) await sql.finishIfDone(client, backfill.id);
      }
      return claimed;
    });
  }

  async #runSlot(claimed: ClaimedSlot): Promise<void> {
    const { backfill, row, lockAt } = claimed;
    const deps = this.#deps;
    const key = { id: backfill.id, slot: row.slot, owner: deps.instanceId };
    const rows = new BackfillSlotRows(deps, key, () => this.claimNow());
    const definition = deps.definition(backfill.task);
    if (!definition || !backfill.job_id) {
      await rows.end(lockAt, "failed", `task "${backfill.task}" is not defined or has no job row`);
      return;
    }
    const run = SlotRun.claimed(
      { id: backfill.job_id, name: backfill.task },
      { nextRunAt: row.slot, lockedAt: lockAt },
      new Date(deps.clock.now()),
    );
    // the slot row's lock, fenced on its lock time as a job row's, renewed by the lock keeper's
    // thread as a live run's (src/engine/lockKeeper.ts): a handler that keeps the event loop busy
    // keeps its slot; the in-process renewal is the thread's fallback
    const watchdog = deps.locks.forRow({
      sql: sql.RENEW_BACKFILL_SLOT_SQL,
      key: sql.backfillSlotLockKey(key),
      renewer: {
        renewLock: async (_jobId, expected, next): Promise<LockRenewal> => {
          if (await sql.renewBackfillSlot(deps.pool, key, expected, next)) return { renewed: true };
          return { renewed: false, found: await sql.selectBackfillSlotHolder(deps.pool, key) };
        },
      },
    });
    const checks = new BackfillChecks(deps, backfill, row);
    const runner = new TaskRunner({ ...deps.runnerDeps, watchdog, checks });
    const ports: SlotRunnerPorts = {
      rows,
      // the slot's end waits for its own outcome row (BackfillSlotRows.endRun)
      recorder: {
        recordOutcome: (slotRun, ending) => rows.outcome(deps.recorder.recordOutcome(slotRun, ending)),
      },
      runner,
      logger: deps.logger,
      clock: deps.clock,
      instanceId: deps.instanceId,
    };
    // a job document of its own: no schedule, so the run decides no next run of the task
    const job: Job = deps.agenda.create(backfill.task, {});
    const owner = new SlotRunner(run, job, definition, ports);
    this.#owners.add(owner);
    const turn: RunTurn = { worker: () => undefined, handlerDone: () => {} };
    try {
      await owner.execute(turn);
    } catch (error) {
      deps.logger.warn({ err: error, task: backfill.task, slot: row.slot }, "backfill slot did not run");
    } finally {
      this.#owners.delete(owner);
    }
  }
}

/** The checks before a backfill slot's handler: its trigger and who asked, and a takeover's dead run. */
class BackfillChecks {
  readonly #deps: BackfillRunnerDeps;
  readonly #backfill: sql.BackfillRow;
  readonly #row: sql.ClaimedSlotRow;

  constructor(deps: BackfillRunnerDeps, backfill: sql.BackfillRow, row: sql.ClaimedSlotRow) {
    this.#deps = deps;
    this.#backfill = backfill;
    this.#row = row;
  }

  /** Pause-all since the claim: the slot is given back untouched (src/engine/taskRunner.ts). */
  pausedNow(): boolean {
    return this.#deps.paused();
  }

  async beforeHandler(run: SlotRun, _job: Job, _preparedAt: Date): Promise<BeforeHandler> {
    const backfill = this.#backfill;
    run.triggeredBy("backfill", backfill.requested_by);
    const previous = this.#row.previous_started_at;
    let rerunOf: PreviousRun | undefined;
    if (previous) {
      // taken over from an instance that died: its run may have recorded the slot already
      if (await sql.slotHasOutcome(this.#deps.pool, backfill.task, run.scheduledAt, previous)) {
        run.finishedByDeadRun();
        return { kind: "finishedByDeadRun" };
      }
      rerunOf = { scheduledAt: run.scheduledAt, startedAt: previous, instanceId: this.#row.previous_holder };
    }
    if (backfill.with_downstream) {
      await sql.reopenDownstreamWaits(this.#deps.pool, backfill.task, run.scheduledAt);
      await this.#deps.dependencies.beforeRun(backfill.task, run.scheduledAt, {
        withDownstream: true,
        downstream: false,
      });
    }
    return { kind: "run", rerunOf, withDownstream: backfill.with_downstream };
  }
}

/** A backfill slot's writes, each fenced on the lock time its run holds (src/engine/sql/backfills.ts). */
class BackfillSlotRows implements Pick<SlotRunnerPorts["rows"], keyof SlotRunnerPorts["rows"]> {
  readonly #deps: BackfillRunnerDeps;
  readonly #key: { id: string; slot: Date; owner: string };
  readonly #ended: () => void;
  /** The write of the run's outcome row, once asked for. */
  #outcome: Promise<void> | undefined;

  constructor(deps: BackfillRunnerDeps, key: { id: string; slot: Date; owner: string }, ended: () => void) {
    this.#deps = deps;
    this.#key = key;
    this.#ended = ended;
  }

  /** The run's outcome row is being written: its slot's end waits for it. */
  outcome(written: Promise<void>): Promise<void> {
    this.#outcome = written;
    return written;
  }

  async startRun(run: SlotRun, job: JobParameters): Promise<void> {
    const held = run.heldLockAt;
    const renewed = new Date(this.#deps.clock.now());
    if (!held || !(await sql.renewBackfillSlot(this.#deps.pool, this.#key, held, renewed, renewed)))
      throw new StaleStartError(job.name);
    run.fenced(renewed);
  }

  async endRun(run: SlotRun): Promise<void> {
    // the outcome row first: a slot marked done has its record, and an instance that dies in
    // between leaves a slot the taker closes without running it again (BackfillChecks)
    await this.#outcome?.catch(() => {});
    const state = run.outcome === "succeeded" || run.outcome === "skipped" ? run.outcome : "failed";
    await this.#endFenced(run, state, run.outcome === "succeeded" ? null : (run.detail ?? null));
  }

  async releaseUnstarted(run: SlotRun): Promise<void> {
    await this.#endFenced(run, "pending", null);
  }

  async closeFinishedSlot(run: SlotRun): Promise<void> {
    const last = await sql.selectSlotLastRun(this.#deps.pool, run.taskName, run.scheduledAt);
    const state = last?.outcome === "succeeded" || last?.outcome === "skipped" ? last.outcome : "failed";
    await this.#endFenced(run, state, "recorded by the run that died");
  }

  async handOff(run: SlotRun): Promise<void> {
    await this.#outcome?.catch(() => {});
    await this.#endFenced(run, "pending", null);
  }

  /** Ends a slot that never got a run (its task is not defined here). */
  async end(fence: Date, state: sql.BackfillSlotState, detail: string): Promise<void> {
    await sql.endBackfillSlot(this.#deps.pool, this.#key, fence, { state, detail });
    await sql.finishIfDone(this.#deps.pool, this.#key.id);
    this.#ended();
  }

  async #endFenced(run: SlotRun, state: sql.BackfillSlotState, detail: string | null): Promise<void> {
    const fence = run.heldLockAt;
    if (!fence) return;
    try {
      const ended = await sql.endBackfillSlot(this.#deps.pool, this.#key, fence, { state, detail });
      run.fenced(undefined);
      if (ended) await sql.finishIfDone(this.#deps.pool, this.#key.id);
    } catch (error) {
      // the lock expires and another instance takes the slot over (its outcome row is read then)
      this.#deps.logger.warn(
        { err: error, task: run.taskName, slot: run.scheduledAt },
        "the end of a backfill slot was not saved",
      );
    } finally {
      this.#ended();
    }
  }
}

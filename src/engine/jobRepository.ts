import { PostgresJobRepository } from "@agendajs/postgres-backend";
import type { JobParameters } from "agenda";
import type { Pool } from "pg";
import type { Clock } from "../core/clock.js";
import type { Logger } from "../core/logger.js";
import { type PauseMark, streakOfData } from "../core/policies/pauseOnFailure.js";
import { isConnectionError, retryWhileDisconnected } from "../db/retry.js";
import { StatementBatch } from "../db/statementBatch.js";
import { knowSlotAfterDue, planStart, saveSlotEnd } from "./slotPolicies.js";
import { type RowAtStart, SlotRun } from "./slotRun.js";
import {
  claimDueJobs,
  closeFinishedSlot,
  handOffRun,
  JOBS_TABLE,
  type JobRowSave,
  type LockRenewal,
  PREVIOUS_LOCK,
  PREVIOUS_OWNER,
  releaseLocks,
  releaseUnstartedRun,
  renewLock,
  restoreLock,
  saveJobRows,
} from "./sql.js";
import { DatabaseUnreachableBeforeStartError, StaleStartError } from "./staleStart.js";
import type { LockRenewer } from "./watchdog.js";

/**
 * The job rows' writes of a run, on Agenda's PostgreSQL repository (kept for Agenda's own API:
 * `create`, `save`, the table and its documents). Agenda's `Job.run()` is not used: the run's
 * owner (src/engine/slotRunner.ts) calls one explicit write per step:
 * - `claimDue` locks the due jobs of all names in one statement, for the claim loop
 *   (src/engine/claimLoop.ts), and makes each one's SlotRun with what the row held (the slot, the
 *   lock time, whether the previous run finished); a job taken over from a dead instance runs at
 *   once, even if the dead run had already moved `next_run_at` to a later slot;
 * - `startRun`, `endRun`, `releaseUnstarted`, `closeFinishedSlot`, `handOff` and `release`: each
 *   fenced on the run's lock time, so a run that lost its lock cannot unlock or re-time the new
 *   owner's run; none overwrites `next_run_at` when the row's cron or timezone changed since the
 *   job was loaded (docs/design.md, "The in-place schedule change");
 * - `release` never rejects (an unhandled rejection would end the process while the database is
 *   down), and the releases asked for together share one statement (a stop before a herd's slot
 *   frees every job claimed ahead).
 */
/** How long the save that ends a run is retried while the database is unreachable. */
const FINAL_SAVE_RETRY_MS = 10 * 60_000;

/** Between its lock and its handler, short waits: a run starts within half a second of the database's return. */
export const BEFORE_START_RETRY = { initialDelayMs: 100, maxDelayMs: 500 };

export interface JobRepositoryLimits {
  lockLifetimeMs: number;
  /** A run's row was given back without a run (see #giveBack): look for due jobs again. */
  onRowGivenBack?: () => void;
  /** A run cut off at shutdown was handed off (its row unlocked and due now). */
  onHandedOff?: (jobId: string, taskName: string) => void;
  /** A slot's end paused its task (pause on failure); called once per pause, after the save committed. */
  onPaused?: (jobId: string, taskName: string, pause: PauseMark) => void;
  /** A slot at most this late is on time; older ones are missed and follow the task's catchUp policy. */
  catchUpGraceMs?: number;
  /** The engine's clock (src/core/clock.ts): the start save's lock time, the takeover hold, a re-run's due time. */
  clock: Clock;
}

export interface ClaimedRow {
  /** The job document as the claim locked it. */
  job: JobParameters;
  run: SlotRun;
}

export class CronwardenJobRepository extends PostgresJobRepository implements LockRenewer {
  readonly #db: Pool;
  readonly #logger: Logger;
  /** Jobs whose run ended but whose end is not saved yet: not to be locked again meanwhile. */
  readonly #finalSavesPending = new Set<string>();
  #takeoversHeldUntil = 0;
  readonly #limits: JobRepositoryLimits;
  readonly #clock: Clock;
  /** The saves that start and end runs, several runs' in one statement (a herd). */
  readonly #saves: StatementBatch<JobRowSave, RowAtStart | null>;
  readonly #releases: StatementBatch<{ jobId: string; lockedAt: Date }, boolean>;

  constructor(pool: Pool, logger: Logger, limits: JobRepositoryLimits) {
    super({ pool, tableName: JOBS_TABLE, ensureSchema: false });
    this.#db = pool;
    this.#logger = logger;
    this.#limits = limits;
    this.#clock = limits.clock;
    this.#saves = new StatementBatch((saves) => saveJobRows(pool, saves), {
      key: (save) => String(save.job._id),
    });
    this.#releases = new StatementBatch((releases) => releaseLocks(pool, releases), {
      key: (release) => release.jobId,
    });
  }

  /**
   * Locks up to `limit` jobs due before `until` (or whose lock expired), of `names` or of any name
   * (null), in one statement, most overdue first, each with its SlotRun (src/engine/sql/claim.ts
   * claimDueJobs). Jobs whose end is still being saved, and `skip` (jobs this instance has claimed
   * or runs, names it does not define), are left alone. A job whose name fails `runsHere` is not
   * returned: its lock is given back at once (fenced on the claim's lock), then `givenBack` is
   * told, so that its owner can be woken.
   */
  async claimDue(claim: {
    names: readonly string[] | null;
    skip: readonly string[];
    until: Date;
    limit: number;
    /** At most this instance's share of the due jobs (src/engine/sql/claim.ts claimDueJobs). */
    share?: { atLeast: number; held: number };
    owner: string;
    now: Date;
    runsHere?: (name: string) => boolean;
    givenBack?: (job: JobParameters) => void;
  }): Promise<ClaimedRow[]> {
    const rows = await claimDueJobs(this.#db, {
      names: claim.names,
      skipNames: [...claim.skip, ...this.#finalSavesPending],
      until: claim.until,
      lockDeadline: this.#takeoverDeadline(new Date(claim.now.getTime() - this.#limits.lockLifetimeMs)),
      lockedAt: claim.now,
      owner: claim.owner,
      lockLifetimeMs: this.#limits.lockLifetimeMs,
      limit: claim.limit,
      ...(claim.share ? { share: claim.share } : {}),
    });
    const claimed: ClaimedRow[] = [];
    const giveBacks: Promise<void>[] = [];
    for (const row of rows) {
      const job = this.#rowToJob(row);
      if (!claim.runsHere || claim.runsHere(job.name)) claimed.push(this.#locked(job));
      else giveBacks.push(this.#giveBackForeign(job, claim.now, row, claim.givenBack));
    }
    // awaited: a pass is over (a drain waits for it) once nothing it locked is left unaccounted for
    await Promise.all(giveBacks);
    return claimed.sort(
      (a, b) =>
        (a.job.nextRunAt?.getTime() ?? 0) - (b.job.nextRunAt?.getTime() ?? 0) ||
        (b.job.priority ?? 0) - (a.job.priority ?? 0),
    );
  }

  /**
   * Frees a claimed job that will not run here (the instance stops before its slot). Fenced on the
   * run's lock: a release held up by an outage could land after another instance locked the job
   * and started it, and must not free that run's lock.
   */
  async release(run: SlotRun): Promise<void> {
    const fence = run.heldLockAt;
    run.fenced(undefined);
    if (!fence) return; // not known which lock is ours: it expires
    try {
      await this.#releases.submit({ jobId: run.jobId, lockedAt: fence });
    } catch (error) {
      this.#logger.debug(
        { err: error, task: run.taskName },
        "could not release a pre-locked job; its lock will expire",
      );
    }
  }

  /** A job claimed by a pass that takes any name, of a name this instance does not define. */
  async #giveBackForeign(
    job: JobParameters,
    claimedAt: Date,
    row: Record<string, unknown>,
    givenBack?: (job: JobParameters) => void,
  ): Promise<void> {
    try {
      const previous = {
        lockedAt: (row[PREVIOUS_LOCK] as Date | null | undefined) ?? null,
        owner: (row[PREVIOUS_OWNER] as string | null | undefined) ?? null,
      };
      if (await restoreLock(this.#db, String(job._id), claimedAt, previous)) givenBack?.(job);
    } catch (error) {
      this.#logger.debug(
        { err: error, task: job.name },
        "could not give back a job this instance does not define; its lock will expire",
      );
    }
  }

  /** After an outage no lock counts as expired for a while (see holdTakeovers). */
  #takeoverDeadline(lockDeadline: Date): Date {
    return this.#clock.now() < this.#takeoversHeldUntil ? new Date(0) : lockDeadline;
  }

  /** Runs whose end (or hand-off) is being saved. */
  get pendingEnds(): number {
    return this.#finalSavesPending.size;
  }

  async renewLock(jobId: string, expected: Date, next: Date): Promise<LockRenewal> {
    return renewLock(this.#db, jobId, expected, next);
  }

  /**
   * After an outage, expired locks are not taken over for one lifetime: nobody could renew
   * during the outage, so "expired" says nothing yet about whether the owner is alive.
   */
  holdTakeovers(forMs: number): void {
    this.#takeoversHeldUntil = this.#clock.now() + forMs;
  }

  /**
   * The save just before the run's checks and handler. Fenced
   * on the lock the claim took, not a later one: a job that waited for a worker past its lock
   * lifetime may have been locked again meanwhile, here or elsewhere, and must not start as well
   * (StaleStartError). The lock is renewed by the same statement, so the run starts with a whole
   * lifetime ahead of it. While the database is unreachable the save is retried up to the run's
   * start deadline; past it the slot is given back and DatabaseUnreachableBeforeStartError thrown.
   */
  async startRun(run: SlotRun, job: JobParameters): Promise<void> {
    const heldLock = run.heldLockAt; // the claim's lock
    if (!heldLock) throw new StaleStartError(job.name);
    const renewed = new Date(this.#clock.now());
    const deadline = run.startDeadline(this.#limits.lockLifetimeMs, renewed.getTime());
    if (this.#limits.catchUpGraceMs !== undefined) planStart(run, job, renewed, this.#limits.catchUpGraceMs);
    let row: RowAtStart | undefined;
    try {
      // a retry (after a connection error) also accepts its own lock time: the first try may have
      // landed and lost its answer. The first try does not: another lock taken in the same
      // millisecond would pass for its own.
      let tries = 0;
      row = await retryWhileDisconnected(
        () => {
          tries += 1;
          const fence = tries === 1 ? [heldLock] : [heldLock, renewed];
          return this.#save(run, { ...job, lockedAt: renewed }, fence, run.scheduledAt);
        },
        {
          ...BEFORE_START_RETRY,
          clock: this.#clock,
          maxElapsedMs: Math.max(0, deadline - this.#clock.now()),
        },
      );
    } catch (error) {
      if (!isConnectionError(error)) throw error;
      // the handler never starts: not a failure of the task; the slot is given back once possible
      void this.releaseUnstarted(run, [heldLock, renewed]);
      throw new DatabaseUnreachableBeforeStartError(job.name, error as Error);
    }
    run.fenced(renewed);
    run.startSaved(row);
  }

  /**
   * The save that ends a run (lock released), retried while the database is unreachable: if it
   * were dropped, the row would keep its lock, and once the lock expired the finished run would
   * be taken for a dead one and run again. Until it lands this instance does not lock the job
   * again; another instance can only take it over after the lock expired, and then the fence
   * makes this late save fail instead of undoing it.
   */
  async endRun(run: SlotRun, job: JobParameters): Promise<void> {
    // the fence of this run, taken now: a later lock of the same job must not lend it its own
    const fence = run.heldLockAt ? [run.heldLockAt] : null;
    let logged = false;
    this.#finalSavesPending.add(job.name);
    try {
      await retryWhileDisconnected(() => this.#save(run, { ...job, lockedAt: undefined }, fence), {
        clock: this.#clock,
        maxElapsedMs: FINAL_SAVE_RETRY_MS,
        // short waits: once the database is back the end lands before the lock can expire and the
        // slot be taken for a dead run's
        maxDelayMs: 500,
        onRetry: (error) => {
          if (logged) return;
          logged = true;
          this.#logger.warn(
            { err: error, task: job.name },
            "the end of a run could not be saved; retrying until the database is back",
          );
        },
      });
    } finally {
      this.#finalSavesPending.delete(job.name);
    }
  }

  /**
   * A run whose handler never started (the database was unreachable before it, or the drain or a
   * lost lock came first) gives its slot back untouched (src/engine/sql/runEnd.ts
   * releaseUnstartedRun). `fences`: the lock times that may be this run's.
   */
  async releaseUnstarted(
    run: SlotRun,
    fences: Date[] = run.heldLockAt ? [run.heldLockAt] : [],
  ): Promise<void> {
    // a takeover re-run is due at once (see #locked); any other slot is due at its own time
    const slot = run.previousRunUnfinished ? new Date(this.#clock.now()) : run.scheduledAt;
    const released = await this.#giveBack(
      run,
      () =>
        releaseUnstartedRun(this.#db, {
          jobId: run.jobId,
          fences,
          slot,
          lastRunAt: run.lastRunAtBefore,
        }),
      {
        retryMs: FINAL_SAVE_RETRY_MS,
        failed:
          "a run that could not start could not give its slot back; its lock expires and the slot is taken over",
        lookAgain: true,
      },
    );
    if (released === undefined) return;
    this.#logger.info(
      { task: run.taskName, slot, released },
      released
        ? "a run that could not start gave its slot back; it runs now"
        : "a run that could not start no longer held its lock; the new holder runs the slot",
    );
  }

  /** A taken-over slot that its dead run had already finished: the row is closed, the slot after it still owed. */
  async closeFinishedSlot(run: SlotRun, job: JobParameters): Promise<void> {
    const fence = run.heldLockAt;
    if (!fence) return;
    const close = {
      jobId: run.jobId,
      fence,
      owed: run.nextRunAtBefore,
      cron: job.repeatInterval === undefined ? null : String(job.repeatInterval),
      timezone: job.repeatTimezone ?? null,
    };
    await this.#giveBack(run, () => closeFinishedSlot(this.#db, close), {
      retryMs: FINAL_SAVE_RETRY_MS,
      failed: "could not close a finished slot's row; its lock will expire",
      lookAgain: true,
    });
  }

  /** A run cut off at shutdown: its slot goes to the other instances at once (src/engine/sql/runEnd.ts handOffRun). */
  async handOff(run: SlotRun): Promise<void> {
    const fence = run.heldLockAt;
    if (!fence) return;
    // the instance is stopping: a short retry, and no look for more jobs here
    const handed = await this.#giveBack(run, () => handOffRun(this.#db, run.jobId, fence), {
      retryMs: 5_000,
      failed: "could not hand a run off; its lock expires and its slot is taken over",
      lookAgain: false,
    });
    if (handed) this.#limits.onHandedOff?.(run.jobId, run.taskName);
  }

  /**
   * What every way of giving a run's row back besides the final save shares: the statement is
   * retried while the database is unreachable, and until it lands this instance does not lock the
   * job again; if it never lands, the lock expires and the slot is taken over (`failed` says so).
   * Then the lock is forgotten and, with `lookAgain`, due jobs are looked for again. Returns the
   * statement's answer, undefined if it failed.
   */
  async #giveBack<T>(
    run: SlotRun,
    statement: () => Promise<T>,
    options: { retryMs: number; failed: string; lookAgain: boolean },
  ): Promise<T | undefined> {
    let answer: T | undefined;
    this.#finalSavesPending.add(run.taskName);
    try {
      answer = await retryWhileDisconnected(statement, {
        clock: this.#clock,
        maxElapsedMs: options.retryMs,
        maxDelayMs: 500,
      });
    } catch (error) {
      this.#logger.warn({ err: error, task: run.taskName }, options.failed);
    } finally {
      this.#finalSavesPending.delete(run.taskName);
    }
    run.fenced(undefined);
    if (options.lookAgain) this.#limits.onRowGivenBack?.();
    return answer;
  }

  /** Agenda's save, fenced (src/engine/sql/save.ts); a save that matches no row throws. */
  async #save(
    run: SlotRun,
    job: JobParameters,
    fence: Date[] | null,
    /** Set for the save that starts a run: the slot it runs, kept in the row with the run's identity. */
    startingSlot?: Date,
  ): Promise<RowAtStart | undefined> {
    const starting = startingSlot !== undefined;
    if (!job._id) throw new Error("Cannot save job state without job ID");
    if (
      !starting &&
      fence &&
      (run.outcome === "failed" || (run.outcome === "succeeded" && streakOfData(job.data) > 0))
    ) {
      const { row, pause } = await saveSlotEnd(this.#db, this.#clock, run, job, fence);
      run.fenced(undefined);
      if (pause) this.#limits.onPaused?.(run.jobId, job.name, pause);
      return row;
    }
    const row = await this.#saves.submit({
      job,
      lastModifiedBy: job.lastModifiedBy ?? null,
      fence,
      startingSlot: startingSlot ?? null,
    });
    if (!row) {
      if (starting) throw new StaleStartError(job.name);
      throw new Error(
        fence
          ? `job ${job._id} (${job.name}): not saved, this instance no longer holds its lock`
          : `job ${job._id} (name: ${job.name}) cannot be updated in the database, maybe it does not exist anymore?`,
      );
    }
    // after the final save the lock is released: later writes (the next run) are not fenced on it
    if (!starting) run.fenced(undefined);
    return row;
  }

  /** Agenda's own mapping of a job row (private in @agendajs/postgres-backend 3.0.6, pinned). */
  #rowToJob(row: Record<string, unknown>): JobParameters {
    return (this as unknown as { rowToJob(row: Record<string, unknown>): JobParameters }).rowToJob(row);
  }

  #locked(job: JobParameters): ClaimedRow {
    const now = new Date(this.#clock.now());
    const run = SlotRun.claimed({ id: String(job._id), name: job.name }, job, now);
    knowSlotAfterDue(job);
    if (run.previousRunUnfinished && job.nextRunAt && job.nextRunAt > now) {
      // the dead run had already computed its next slot; re-run now instead of waiting for it
      return { job: { ...job, nextRunAt: now }, run };
    }
    return { job, run };
  }
}

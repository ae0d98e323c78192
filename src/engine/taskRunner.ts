import { setTimeout as sleep } from "node:timers/promises";
import { exponential, type Job } from "agenda";
import type { Pool } from "pg";
import { type Clock, systemClock } from "../core/clock.js";
import type { UpstreamRun } from "../core/dependencies/spec.js";
import type { Logger } from "../core/logger.js";
import {
  POLICY_DATA_KEY,
  policyOfData,
  type StoredPolicy,
  slotSource,
} from "../core/policies/catchUpAtStart.js";
import { dueAt, slotOfDue } from "../core/policies/jitter.js";
import { cancelAt, decideOverlapAtEnd } from "../core/policies/overlap.js";
import { nextSlot, rowSchedule, slotsBetween } from "../core/policies/schedule.js";
import type {
  EngineHooks,
  EngineRun,
  PreviousRun,
  RunHandler,
  RunResult,
  TaskDefinitionOptions,
} from "./engineApi.js";
import { BEFORE_START_RETRY, START_MARGIN_MS } from "./jobRepository.js";
import { isConnectionError, retryWhileDisconnected } from "./retry.js";
import { RunJournal } from "./runJournal.js";
import type { RunLedger } from "./runLedger.js";
import { decodeRunMeta } from "./runLogMeta.js";
import type { RunRecorder } from "./runRecorder.js";
import { LockLostError, RunTimeoutError, superviseRun } from "./runSupervisor.js";
import type { SlotRun } from "./slotRun.js";
import { QUIET_AFTER_SLOT_MS, slotWaitStep } from "./slotWait.js";
import * as sql from "./sql.js";
import { DatabaseUnreachableBeforeStartError, RunNotStartedError } from "./staleStart.js";
import type { Watchdog } from "./watchdog.js";

export interface TaskRunnerDeps {
  pool: Pool;
  /** Where the run of a job it is handed is (src/engine/runLedger.ts); the runner drives it from there. */
  ledger: Pick<RunLedger, "starting">;
  watchdog: Watchdog;
  recorder: RunRecorder;
  logger: Logger;
  hooks: EngineHooks;
  timeoutGraceMs: number;
  lockLifetimeMs: number;
  /**
   * This run calls its handler no more (its last attempt is over, or was given up on at its
   * timeout; its final save follows): its worker may start the next due run (src/engine/claimLoop.ts).
   */
  handlerDone?: (jobId: string) => void;
  /**
   * Resolves once one of the claim loop's workers is this run's (src/engine/claimLoop.ts): asked
   * after the start save, the checks and the wait for the slot, just before the handler.
   * Undefined: one was free at once.
   */
  worker?: (jobId: string) => Promise<void> | undefined;
  /** Task dependencies: a downstream run's upstream runs, and manual runs with their downstreams. */
  dependencies?: {
    beforeRun(
      taskName: string,
      slot: Date,
      options: { withDownstream: boolean; downstream: boolean },
    ): Promise<UpstreamRun[] | undefined>;
  };
  /** The engine's clock (src/core/clock.ts): a slot's start, each attempt's, the overlap and start deadlines. */
  clock?: Clock;
  /** How long before its slot the claim loop hands a run over (its handler waits for the slot). */
  startAheadMs?: number;
}

/** The runs in progress on this instance, by job id: the drain aborts them at its deadline. */
export type RunningRuns = Map<string, { taskName: string; controller: AbortController }>;

const DEFAULT_RETRY_DELAY_MS = 1_000;
const DEFAULT_RETRY_MAX_DELAY_MS = 60_000;
/** A handler's wait for its slot may outlast the start-ahead by this much (timers fire late under load). */
const WAIT_SLACK_MS = 1_000;
const NEVER_ABORTED = new AbortController().signal;
const NEVER_LOST = new Promise<string>(() => {});

/** What the checks before the handler decided: the run goes on, or the slot is skipped or already finished. */
type BeforeHandler =
  | { kind: "skipped" | "finished" }
  | { kind: "run"; rerunOf: PreviousRun | undefined; withDownstream: boolean };

/**
 * Runs one slot of one task, from the moment Agenda hands over a locked job: skips it if the
 * config changed since the lock, marks re-runs and manual runs, keeps the lock renewed, and runs
 * the handler once per attempt. Retries happen here, within the slot and under the same lock,
 * using Agenda's exponential backoff for the delays: Agenda's own retry counts failures across
 * slots (`fail_count`), so after one slot used up its retries, later slots would get none.
 */
export class TaskRunner {
  readonly #deps: TaskRunnerDeps;
  readonly #running: RunningRuns;
  readonly #clock: Clock;

  constructor(deps: TaskRunnerDeps, running: RunningRuns) {
    this.#deps = deps;
    this.#clock = deps.clock ?? systemClock;
    this.#running = running;
  }

  async run(taskName: string, job: Job, handler: RunHandler, options: TaskDefinitionOptions): Promise<void> {
    const { ledger, logger } = this.#deps;
    const jobId = String(job.attrs._id);
    const clock = this.#clock;
    const preparedAt = new Date(clock());
    const entry = ledger.starting(jobId, preparedAt);
    let prepared: BeforeHandler;
    try {
      prepared = await this.#beforeHandler(taskName, job, entry, preparedAt);
    } catch (error) {
      // an unexpected error ends the run at its time, as a skip does (below); a run that did not
      // start stamps no end: its row is given back as it was
      if (!(error instanceof RunNotStartedError)) await this.#untilHandlerTime(entry);
      throw error;
    }
    if (prepared.kind !== "run") {
      // a slot skipped or closed before its time ends at its time: Agenda stamps the end
      // (`lastFinishedAt`) when this returns, and an end before the recorded start would make the
      // row look like a run that never finished (taken over as a dead run at the next claim)
      await this.#untilHandlerTime(entry);
      return;
    }
    const { rerunOf } = prepared;
    entry.repeats(rerunOf);

    // set up before the wait for the slot, so that little is left between the slot and the handler
    const slot = new AbortController(); // shutdown past the drain deadline; overlap cancelRunning
    this.#running.set(jobId, { taskName, controller: slot });
    const policy = policyOfData(job.attrs.data);
    let lockLostReason: string | undefined;
    let loseLock: (reason: string) => void = () => {};
    const lockLost = new Promise<string>((resolve) => {
      loseLock = (reason) => {
        lockLostReason = reason;
        resolve(reason);
      };
    });
    const stopWatchdog = this.#deps.watchdog.watch({
      jobId,
      taskName,
      lockedAt: entry.heldLockAt ?? preparedAt,
      onRenewed: (lockedAt) => {
        entry.fenced(lockedAt);
        this.#deps.hooks.lockRenewed?.(taskName);
      },
      onLost: (reason) => loseLock(reason),
    });
    const retryDelay = options.retry
      ? exponential({
          delay: options.retry.delayMs ?? DEFAULT_RETRY_DELAY_MS,
          maxDelay: options.retry.maxDelayMs ?? DEFAULT_RETRY_MAX_DELAY_MS,
          maxRetries: options.retry.maxRetries,
        })
      : undefined;
    let slotStartedAt = preparedAt;
    let cancelTimer: NodeJS.Timeout | undefined;
    let overlapCancelled = false;

    try {
      await this.#untilHandlerTime(entry, slot.signal, lockLost);
      const worker =
        slot.signal.aborted || lockLostReason !== undefined ? undefined : this.#deps.worker?.(jobId);
      if (worker) await Promise.race([worker, lockLost, aborted(slot.signal)]);
      if (slot.signal.aborted || lockLostReason !== undefined) {
        // cut off at the drain, or the lock lost, while it waited for its slot or a worker: nothing ran here
        entry.notStartedAfterAll(); // the final save gives the slot back (CronwardenJobRepository)
        throw new RunNotStartedError(
          `${taskName}: ${lockLostReason === undefined ? "the shutdown's drain deadline came" : `the lock was lost (${lockLostReason})`} before its slot; the handler did not start and the slot was given back`,
        );
      }
      slotStartedAt = new Date(clock());
      // overlap cancelRunning: the handler's signal fires when the next slot comes due
      const cancelTime = cancelAt(
        policy.overlap,
        slotStartedAt.getTime(),
        job.attrs.nextRunAt ? new Date(job.attrs.nextRunAt).getTime() : null,
      );
      if (cancelTime !== undefined)
        cancelTimer = setTimeout(
          () => {
            overlapCancelled = true;
            slot.abort(
              new Error(
                `cancelled: the next slot is due at ${new Date(cancelTime).toISOString()} (overlap: cancelRunning)`,
              ),
            );
          },
          Math.max(0, cancelTime - clock()),
        );
      for (let attempt = 1; ; attempt++) {
        const run: EngineRun = {
          taskName,
          jobId,
          scheduledAt: entry.scheduledAt,
          startedAt: attempt === 1 ? slotStartedAt : new Date(clock()),
          attempt,
          trigger: entry.trigger ?? "schedule",
          ...(entry.requestedBy === undefined ? {} : { requestedBy: entry.requestedBy }),
          signal: slot.signal,
          rerunOf,
          journal: new RunJournal(),
          ...(entry.upstreams ? { upstreams: entry.upstreams } : {}),
          ...(prepared.withDownstream ? { withDownstream: true } : {}),
        };
        entry.attemptStarted(attempt, run.startedAt);
        // a handler started at its slot: its bookkeeping waits until the others woken for the same
        // instant have started; one started later (a herd's runs waiting for a worker) does not wait
        const quietMs =
          attempt === 1 && entry.handlerAt !== undefined
            ? Math.max(0, entry.handlerAt.getTime() + QUIET_AFTER_SLOT_MS - slotStartedAt.getTime())
            : 0;
        const result = await this.#attempt(run, handler, options, lockLost, slot, quietMs, () => {
          if (attempt === 1) this.#deps.recorder.recordStart(jobId, taskName);
        });
        if (overlapCancelled && result.error && !entry.handedOff) {
          // not a failure of the task: the next slot replaced it (no failure in a row, no alert)
          const detail = `cancelled when the next slot came due (overlap: cancelRunning): ${result.error.message}`;
          entry.settle("interrupted", detail);
          logger.info({ task: taskName, slot: entry.scheduledAt }, `run ${detail}`);
          throw new Error(detail);
        }
        if (entry.handedOff) {
          if (!result.error) entry.endedAfterCutOff();
          else {
            const detail = `cut off at shutdown after the drain timeout (${result.error.message}); handed to another instance, which re-runs the slot`;
            entry.settle("interrupted", detail);
            logger.warn({ task: taskName, slot: entry.scheduledAt }, `run interrupted: ${detail}`);
            // not final: another instance runs the slot again
            this.#deps.hooks.runFinished?.(run, {
              ...result,
              outcome: "interrupted",
              error: new Error(detail),
              final: false,
            });
            throw new Error(detail);
          }
        }
        entry.attemptEnded(run.journal, result.error, new Date(run.startedAt.getTime() + result.durationMs));
        const delayMs =
          result.error && retryDelay && isRetryable(result.error, lockLostReason, slot.signal)
            ? retryDelay({ attempt, error: result.error, jobName: taskName, jobData: job.attrs.data })
            : null;
        this.#deps.hooks.runFinished?.(run, { ...result, final: delayMs === null });
        if (!result.error) {
          entry.settle("succeeded");
          return;
        }
        if (delayMs === null) {
          entry.settle("failed", result.error.message);
          throw result.error;
        }
        this.#deps.recorder.recordFailedAttempt(jobId, taskName, {
          attempt,
          startedAt: run.startedAt,
          endedAt: entry.endedAt ?? new Date(clock()),
          error: result.error,
          retryDelayMs: delayMs,
          journal: run.journal,
        });
        this.#deps.hooks.retryScheduled?.(run, result.error, delayMs);
        const waited = await Promise.race([
          sleep(delayMs, "waited", { signal: slot.signal }).catch(() => "shutdown" as const),
          lockLost.then(() => "lost" as const),
        ]);
        if (waited !== "waited") {
          const reason =
            waited === "lost"
              ? `lock lost before retry ${attempt + 1}: ${lockLostReason}`
              : "shutdown before the retry";
          entry.settle("failed", reason);
          throw new Error(`${result.error.message} (${reason})`);
        }
      }
    } finally {
      clearTimeout(cancelTimer);
      this.#deps.handlerDone?.(jobId);
      // a run that lost its lock or was handed off does not decide the row's next run: its owner does
      if (lockLostReason === undefined && !entry.handedOff && !entry.notStarted)
        // the skipped records land before the run's final save moves the row past their slots: a
        // process killed in between leaves its slot to the taker, not a slot without a record
        await this.#applyOverlapAtEnd(taskName, jobId, job, slotStartedAt, policy, entry);
      await stopWatchdog();
      this.#running.delete(jobId);
    }
  }

  /**
   * A run handed over before its slot (src/engine/claimLoop.ts, startAheadMs) has made its start
   * save and checks; its handler, or the end of a slot it skipped, waits here for the slot. The
   * wait is bounded in monotonic time by the start-ahead: a wall clock stepped back must not keep
   * a start-saved lock waiting (a skipped slot's lock has no watchdog renewing it).
   */
  async #untilHandlerTime(
    entry: SlotRun,
    signal: AbortSignal = NEVER_ABORTED,
    lockLost: Promise<string> = NEVER_LOST,
  ): Promise<void> {
    const at = entry.handlerAt?.getTime();
    if (at === undefined) return;
    const giveUpAt = performance.now() + (this.#deps.startAheadMs ?? 0) + WAIT_SLACK_MS;
    let lost = false;
    void lockLost.then(() => {
      lost = true;
    });
    for (let step = slotWaitStep(at - this.#clock()); step !== "done" && !lost && !signal.aborted; ) {
      const bound = giveUpAt - performance.now();
      if (bound <= 0) return;
      if (step === "turn") await new Promise<void>((resolve) => setImmediate(resolve));
      else
        await Promise.race([
          sleep(Math.min(step.timerMs, Math.ceil(bound)), undefined, { signal }).catch(() => {}),
          lockLost,
        ]);
      step = slotWaitStep(at - this.#clock());
    }
  }

  /**
   * The overlap decision at a run's end (src/core/policies/overlap.ts): the slots that fell due
   * while it ran are recorded skipped (one log line, one event), and for `skip` the next run moves
   * to the first slot after now. Written by the run's final save (the same job object).
   */
  async #applyOverlapAtEnd(
    taskName: string,
    jobId: string,
    job: Job,
    startedAt: Date,
    policy: StoredPolicy,
    entry: SlotRun,
  ): Promise<void> {
    try {
      const data = job.attrs.data as Record<string, unknown> | undefined;
      const repeat = job.attrs.repeatInterval;
      const schedule = rowSchedule(
        repeat === undefined || repeat === null ? null : String(repeat),
        data?.[POLICY_DATA_KEY] ?? null,
      );
      if (!schedule) return;
      const timezone = job.attrs.repeatTimezone ?? "UTC";
      const pendingDue = job.attrs.nextRunAt ? new Date(job.attrs.nextRunAt).getTime() : null;
      const { jitterMs } = policy;
      const pendingSlot =
        pendingDue !== null && jitterMs > 0
          ? (slotOfDue(
              taskName,
              pendingDue,
              jitterMs,
              slotsBetween(schedule, timezone, pendingDue - jitterMs + 1, pendingDue, 10_000).slots.reverse(),
            ) ?? pendingDue)
          : pendingDue;
      // the start save's time, at which the pending slot was computed (Agenda's Job.run sets it
      // just before): a save slow enough to end past that slot must not make it look owed by
      // catch-up, and leave the slots the run covered without a record
      const decision = decideOverlapAtEnd({
        policy: policy.overlap,
        runStartedAt: Math.min(job.attrs.lastRunAt?.getTime() ?? startedAt.getTime(), startedAt.getTime()),
        handlerStartedAt: startedAt.getTime(),
        // the run's own slot (a re-run's: the slot it repeats): a run that took it late is not
        // "still going" for the slots that fell due only because of that
        slotDueAt:
          entry.trigger === "manual"
            ? entry.scheduledAt.getTime()
            : dueAt(taskName, entry.scheduledAt.getTime(), jitterMs),
        ...(entry.rerun ? { rerunOf: { slot: entry.scheduledAt.getTime() } } : {}),
        now: this.#clock(),
        pendingSlot,
        schedule: slotSource(schedule, timezone),
      });
      if (!decision) return;
      if (decision.runs !== null && decision.runs !== pendingSlot)
        job.attrs.nextRunAt = new Date(dueAt(taskName, decision.runs, jitterMs));
      if (decision.nextAfter !== undefined) {
        const next = nextSlot(schedule, timezone, decision.nextAfter);
        job.attrs.nextRunAt = next === undefined ? null : new Date(dueAt(taskName, next, jitterMs));
      }
      await this.#reportSkipped(jobId, taskName, "overlap", decision, decision.skipped, decision.runs);
    } catch (error) {
      this.#deps.logger.warn(
        { err: error, task: taskName },
        "could not apply the overlap policy; Agenda's next run stands",
      );
    }
  }

  /**
   * The checks and reads between the lock and the handler (docs/design.md, "A run's path before
   * its handler"): the skip check, the run-now mark, and for a takeover the dead run and whether it
   * had finished its slot. Each database call is retried while the database is unreachable, as long
   * as the lock lasts; past that the run did not start: it is released untouched, never a failure.
   */
  async #beforeHandler(taskName: string, job: Job, entry: SlotRun, preparedAt: Date): Promise<BeforeHandler> {
    const { logger, pool } = this.#deps;
    const jobId = String(job.attrs._id);
    const lockedAt = entry.heldLockAt?.getTime() ?? preparedAt.getTime();
    const deadline = lockedAt + this.#deps.lockLifetimeMs - START_MARGIN_MS;
    const beforeStart = <T>(query: () => Promise<T>) =>
      retryWhileDisconnected(query, {
        ...BEFORE_START_RETRY,
        maxElapsedMs: Math.max(0, deadline - this.#clock()),
      });
    try {
      if (!this.#applyCatchUp(taskName, jobId, entry)) return { kind: "skipped" };
      const skipReason = await this.#whySkip(entry, jobId, job, beforeStart);
      if (skipReason) {
        entry.settle("skipped", skipReason);
        logger.info({ task: taskName, slot: entry.scheduledAt, reason: skipReason }, "run skipped");
        return { kind: "skipped" };
      }
      const manual = manualRunOf(job.attrs.data);
      if (manual) await beforeStart(() => sql.clearManualRun(pool, jobId));
      entry.triggeredBy(manual ? "manual" : "schedule", manual?.by);
      const withDownstream = manual?.withDownstream === true;
      const downstream =
        typeof job.attrs.data === "object" && job.attrs.data !== null && "after" in job.attrs.data;
      const upstreamsOf = async (slot: Date) => {
        // a task with its own schedule, not asked to run its downstreams: nothing to ask
        if (!withDownstream && !downstream) return;
        entry.waitedFor(
          await beforeStart(
            () =>
              this.#deps.dependencies?.beforeRun(taskName, slot, { withDownstream, downstream }) ??
              Promise.resolve(undefined),
          ),
        );
      };
      if (!entry.previousRunUnfinished) {
        await upstreamsOf(entry.scheduledAt);
        return { kind: "run", rerunOf: undefined, withDownstream };
      }
      // the dead run's identity is in the job row since its start save; rows from before that
      // are read from the run log's last start row
      const rerunOf =
        entry.deadRun ??
        (await beforeStart(() => this.#previousRun(jobId, job.attrs.lastRunAt ?? preparedAt)));
      const slot = rerunOf.scheduledAt;
      const since = rerunOf.startedAt;
      if (slot && (await beforeStart(() => sql.slotHasOutcome(pool, taskName, slot, since)))) {
        // the run that died had finished and recorded its slot; only its end was not saved
        entry.finishedByDeadRun(); // Agenda's outcome row for this non-run is not written
        logger.info(
          { task: taskName, slot, rerunOf },
          "not re-run: the run that died had already recorded the outcome of its slot; its end is saved now",
        );
        return { kind: "finished" };
      }
      await upstreamsOf(slot ?? entry.scheduledAt);
      return { kind: "run", rerunOf, withDownstream };
    } catch (error) {
      if (!isConnectionError(error)) throw error;
      entry.notStartedAfterAll(); // the final save gives the slot back (CronwardenJobRepository)
      throw new DatabaseUnreachableBeforeStartError(taskName, error as Error);
    }
  }

  /**
   * One policy decision's skipped slots: a skipped run record for each listed slot (`recorded`),
   * one log line and one hook call for the whole decision, not one per slot.
   */
  #reportSkipped(
    jobId: string,
    taskName: string,
    policy: "catchUp" | "overlap",
    decision: { skipped: number[]; skippedCount: number; atLeast: boolean; reason: string },
    recorded: number[],
    runs: number | null,
  ): Promise<void> {
    const { skipped, skippedCount, atLeast, reason } = decision;
    const first = skipped[0];
    if (first === undefined) return Promise.resolve();
    const unlisted = skippedCount - skipped.length;
    const more =
      unlisted > 0 || atLeast
        ? `and ${atLeast ? "at least " : ""}${unlisted} more slot(s) not listed one by one`
        : null;
    const written = this.#deps.recorder.recordSkippedSlots(
      jobId,
      taskName,
      recorded.map((slot) => new Date(slot)),
      reason,
      more,
    );
    const skippedSlots = {
      taskName,
      policy,
      count: skippedCount,
      atLeast,
      first: new Date(first),
      last: new Date(skipped.at(-1) as number),
      runs: runs === null ? null : new Date(runs),
      reason,
    };
    const counted = `${atLeast ? "at least " : ""}${skippedCount}`;
    const message =
      policy === "overlap"
        ? `overlap: ${counted} slot(s) skipped (${reason})`
        : `catch-up: ${counted} missed slot(s) skipped (${reason}); ${runs === null ? "none runs now" : `the slot ${new Date(runs).toISOString()} runs now`}`;
    this.#deps.logger.info(
      {
        task: taskName,
        skipped: skippedCount,
        atLeast,
        firstSkipped: skippedSlots.first,
        lastSkipped: skippedSlots.last,
        runs: skippedSlots.runs,
        reason,
      },
      message,
    );
    this.#deps.hooks.slotsSkipped?.(skippedSlots);
    return written;
  }

  /**
   * The catch-up decision of this run's start save (src/core/policies/catchUp.ts): records the
   * slots it skipped, one log line and one hook call per decision. False: nothing runs now (the
   * run's own record is the first skipped slot).
   */
  #applyCatchUp(taskName: string, jobId: string, entry: SlotRun): boolean {
    const decision = entry.catchUp;
    if (decision?.kind !== "catch-up") return true;
    const { run, skipped, reason } = decision;
    // without a run, the run's own outcome row records the first skipped slot
    void this.#reportSkipped(
      jobId,
      taskName,
      "catchUp",
      decision,
      run === null ? skipped.slice(1) : skipped,
      run,
    );
    if (run !== null) return true;
    entry.settle("skipped", reason);
    return false;
  }

  async #attempt(
    run: EngineRun,
    handler: RunHandler,
    options: TaskDefinitionOptions,
    lockLost: Promise<string>,
    slot: AbortController,
    quietMs: number,
    recordStart: () => void,
  ): Promise<Omit<RunResult, "final">> {
    const { hooks, logger } = this.#deps;
    // with retries, each attempt has its own signal, so that a timed-out attempt's abort does not
    // abort the next; a slot of one attempt aborts the slot's own (one controller less per run)
    const attempt = options.retry ? new AbortController() : slot;
    const slotSignal = slot.signal;
    const forward = () => attempt.abort(slotSignal.reason);
    if (attempt !== slot) slotSignal.addEventListener("abort", forward, { once: true });
    try {
      const attemptRun = attempt === slot ? run : { ...run, signal: attempt.signal };
      return await superviseRun({
        run: () => handler(attemptRun),
        // after the handler's call (in the same turn, or after the quiet spell of a run started at
        // its slot): the slot's time is the handler's, and the start row, the log line and the
        // events still come before anything the run ends with
        started: () => {
          recordStart();
          hooks.runStarted?.(attemptRun);
        },
        quietMs,
        now: this.#clock,
        abort: (error) => attempt.abort(error),
        lockLost,
        timeoutMs: options.timeoutMs,
        graceMs: this.#deps.timeoutGraceMs,
        taskName: run.taskName,
        startedAt: run.startedAt,
        onLockLost: (reason) => {
          logger.error(
            { task: run.taskName, slot: run.scheduledAt, reason },
            `lock lost: ${reason}; the run's signal fired`,
          );
          hooks.lockLost?.(attemptRun, reason);
        },
        onAbandoned: (reason) => {
          logger.error({ task: run.taskName, slot: run.scheduledAt, reason }, `run abandoned: ${reason}`);
          hooks.abandoned?.(attemptRun, reason);
        },
      });
    } finally {
      if (attempt !== slot) slotSignal.removeEventListener("abort", forward);
    }
  }

  /**
   * Agenda pre-locks jobs due within one poll; the config may have changed since. The save that
   * Agenda makes just before the handler reads the row back; without it, the row is read here.
   */
  async #whySkip(
    entry: SlotRun,
    jobId: string,
    job: Job,
    beforeStart: <T>(query: () => Promise<T>) => Promise<T>,
  ): Promise<string | undefined> {
    const guard =
      entry.takeRowAtStart() ?? (await beforeStart(() => sql.selectRunGuard(this.#deps.pool, jobId)));
    if (!guard) return "the job row no longer exists";
    if (guard.disabled) return "the task was disabled after this slot was locked";
    // a takeover re-runs a slot that already started under its schedule: a re-timing since then
    // decides the next slot, not whether this one is finished
    if (entry.previousRunUnfinished) return undefined;
    if (
      guard.repeat_interval !==
        (job.attrs.repeatInterval === undefined || job.attrs.repeatInterval === null
          ? null
          : String(job.attrs.repeatInterval)) ||
      guard.repeat_timezone !== (job.attrs.repeatTimezone ?? null)
    ) {
      return `the schedule changed to "${guard.repeat_interval}" (${guard.repeat_timezone}) after this slot was locked; the next run follows the new schedule`;
    }
    return undefined;
  }

  /** The run that died: the last start recorded before this run's own. */
  async #previousRun(jobId: string, before: Date): Promise<PreviousRun> {
    const row = await sql.selectLastStart(this.#deps.pool, jobId, before);
    const meta = decodeRunMeta(row?.meta);
    const instanceId = meta.instanceId ?? row?.agenda_name ?? null;
    return { scheduledAt: meta.scheduledAt ?? null, startedAt: row?.timestamp ?? before, instanceId };
  }
}

/** Resolves when the signal fires. */
function aborted(signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => signal.addEventListener("abort", () => resolve(), { once: true }));
}

/** A lost lock, an abandoned handler or a shutdown end the slot; other failures may be retried. */
function isRetryable(error: Error, lockLostReason: string | undefined, slotSignal: AbortSignal): boolean {
  if (lockLostReason !== undefined || slotSignal.aborted || error instanceof LockLostError) return false;
  return !(error instanceof RunTimeoutError && /ignored its abort signal/.test(error.message));
}

/** The run-now request the job row carries, if any, with who asked (absent in rows from older versions). */
function manualRunOf(data: unknown): { by: string | undefined; withDownstream: boolean } | undefined {
  if (typeof data !== "object" || data === null || !("manualRun" in data)) return undefined;
  const request = (data as { manualRun: unknown }).manualRun;
  const fields = typeof request === "object" && request !== null ? (request as Record<string, unknown>) : {};
  return {
    by: typeof fields.by === "string" ? fields.by : undefined,
    withDownstream: fields.withDownstream === true,
  };
}

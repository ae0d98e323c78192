import { exponential, type Job } from "agenda";
import { type Clock, systemClock } from "../core/clock.js";
import { isoTime } from "../core/isoTime.js";
import { type Logger, toError } from "../core/logger.js";
import { policyOfData, type StoredPolicy } from "../core/policies/catchUpAtStart.js";
import { cancelAt } from "../core/policies/overlap.js";
import { NO_RUN_TRACING, type RunSpan, type RunTracer } from "../observability/tracing.js";
import type { RunTurn } from "./claimLoop.js";
import type { EngineHooks, EngineRun, RunHandler, RunResult, TaskDefinitionOptions } from "./engineApi.js";
import type { BeforeHandler, RunChecks } from "./runChecks.js";
import { RunJournal } from "./runJournal.js";
import { RunLock } from "./runLock.js";
import type { RunRecorder } from "./runRecorder.js";
import { LockLostError, RunTimeoutError, superviseRun } from "./runSupervisor.js";
import type { SkippedSlots } from "./skippedSlots.js";
import type { SlotRun } from "./slotRun.js";
import { QUIET_AFTER_SLOT_MS, slotWaitStep } from "./slotWait.js";
import { PausedBeforeStartError, RunNotStartedError } from "./staleStart.js";
import type { LockWatcher } from "./watchdog.js";

export interface TaskRunnerDeps {
  /** Renews the run's lock while it runs (src/engine/lockKeeper.ts). */
  watchdog: LockWatcher;
  recorder: RunRecorder;
  logger: Logger;
  hooks: EngineHooks;
  timeoutGraceMs: number;
  lockLifetimeMs: number;
  /** The checks between the start save and the handler (src/engine/runChecks.ts). */
  checks: RunChecks;
  /** Slots recorded skipped by a policy (src/engine/skippedSlots.ts). */
  skipped: SkippedSlots;
  /** The engine's clock (src/core/clock.ts): a slot's start, each attempt's, the overlap and start deadlines. */
  clock?: Clock;
  /** How long before its slot the claim loop hands a run over (its handler waits for the slot). */
  startAheadMs?: number;
  /** A span per attempt (src/observability/tracing.ts); none without OpenTelemetry. */
  tracer?: RunTracer;
}

/** What the run owner (src/engine/slotRunner.ts) hands the runner besides the run. */
export interface HandlerTurn {
  /** The job document (Agenda's Job: its attrs are written by the final save). */
  job: Job;
  handler: RunHandler;
  options: TaskDefinitionOptions;
  /** The run's use of the claim loop's workers (src/engine/claimLoop.ts RunTurn). */
  turn: RunTurn;
  /** Fires at the drain deadline (shutdown) or for overlap cancelRunning. */
  slot: AbortController;
}

/** How the runner's part ended: the owner writes the run's end from it. */
export type HandlerEnd = "ran" | "skipped" | "finishedByDeadRun";

const DEFAULT_RETRY_DELAY_MS = 1_000;
const DEFAULT_RETRY_MAX_DELAY_MS = 60_000;
/** A handler's wait for its slot may outlast the start-ahead by this much (timers fire late under load). */
const WAIT_SLACK_MS = 1_000;
const NEVER_ABORTED = new AbortController().signal;
const NEVER_LOST = new Promise<string>(() => {});

/**
 * The part of a slot's run between its start save and its final save (the owner,
 * src/engine/slotRunner.ts, makes both): the checks before the handler (the catch-up decision,
 * a config change since the lock, the run-now mark, a dead run's slot), the wait for the slot and
 * a worker, and the handler once per attempt under a renewed lock. Retries happen here, within
 * the slot and under the same lock, using Agenda's exponential backoff for the delays: Agenda's
 * own retry counts failures across slots (`fail_count`), so after one slot used up its retries,
 * later slots would get none. A failure is thrown; a skip or a finished slot is the answer.
 */
export class TaskRunner {
  readonly #deps: TaskRunnerDeps;
  readonly #clock: Clock;

  constructor(deps: TaskRunnerDeps) {
    this.#deps = deps;
    this.#clock = deps.clock ?? systemClock;
  }

  async run(entry: SlotRun, given: HandlerTurn): Promise<HandlerEnd> {
    const preparedAt = new Date(this.#clock.now());
    entry.starting(preparedAt);
    let prepared: BeforeHandler;
    try {
      prepared = await this.#deps.checks.beforeHandler(entry, given.job, preparedAt);
    } catch (error) {
      // an unexpected error ends the run at its time, as a skip does (below); a run that did not
      // start stamps no end: its row is given back as it was
      if (!(error instanceof RunNotStartedError)) await this.#untilHandlerTime(entry);
      throw error;
    }
    if (prepared.kind !== "run") {
      // a slot skipped or closed before its time ends at its time: the final save stamps the end
      // (`lastFinishedAt`), and an end before the recorded start would make the row look like a
      // run that never finished (taken over as a dead run at the next claim)
      await this.#untilHandlerTime(entry);
      return prepared.kind;
    }
    entry.repeats(prepared.rerunOf);
    const policy = policyOfData(given.job.attrs.data);
    const { watchdog: watcher, logger, hooks } = this.#deps;
    const lock = new RunLock(entry, { watcher, logger, hooks });
    let slotStartedAt: Date | undefined;
    try {
      slotStartedAt = await this.#untilWorker(entry, given, lock);
      await this.#attempts(entry, given, prepared.withDownstream, lock, slotStartedAt, policy);
      return "ran";
    } finally {
      given.turn.handlerDone();
      // a run that lost its lock, was cut off or never called its handler does not decide the
      // row's next run: the lock's owner does
      if (slotStartedAt && lock.reason === undefined && !entry.cutOffAtShutdown)
        // the skipped records land before the run's final save moves the row past their slots: a
        // process killed in between leaves its slot to the taker, not a slot without a record
        await this.#deps.skipped.overlapAtEnd(entry, given.job, slotStartedAt, policy);
      await lock.stop();
    }
  }

  /**
   * Waits for the slot and a worker; the handler's start time. Cut off at the drain, or the lock
   * lost, meanwhile: nothing ran here, the run did not start (the owner gives the slot back).
   */
  async #untilWorker(entry: SlotRun, given: HandlerTurn, lock: RunLock): Promise<Date> {
    const signal = given.slot.signal;
    await this.#untilHandlerTime(entry, signal, lock.lost);
    const worker = signal.aborted || lock.reason !== undefined ? undefined : given.turn.worker();
    if (worker) await Promise.race([worker, lock.lost, aborted(signal)]);
    const lostFor = lock.reason;
    if (signal.aborted || lostFor !== undefined)
      throw new RunNotStartedError(
        `${entry.taskName}: ${lostFor === undefined ? "the shutdown's drain deadline came" : `the lock was lost (${lostFor})`} before its slot; the handler did not start and the slot was given back`,
      );
    // pause-all since its checks, while it waited for its slot or a worker: given back untouched
    if (this.#deps.checks.pausedNow()) throw new PausedBeforeStartError(entry.taskName);
    return new Date(this.#clock.now());
  }

  /** The handler once per attempt, until one succeeds or the retry policy gives up (then it throws). */
  async #attempts(
    entry: SlotRun,
    given: HandlerTurn,
    withDownstream: boolean,
    lock: RunLock,
    slotStartedAt: Date,
    policy: StoredPolicy,
  ): Promise<void> {
    const { job, options, slot } = given;
    const cancel = this.#cancelAtNextSlot(job, slot, slotStartedAt, policy);
    const retryDelay = options.retry
      ? exponential({
          delay: options.retry.delayMs ?? DEFAULT_RETRY_DELAY_MS,
          maxDelay: options.retry.maxDelayMs ?? DEFAULT_RETRY_MAX_DELAY_MS,
          maxRetries: options.retry.maxRetries,
        })
      : undefined;
    try {
      for (let attempt = 1; ; attempt++) {
        const run = this.#engineRun(
          entry,
          attempt,
          attempt === 1 ? slotStartedAt : undefined,
          slot,
          withDownstream,
        );
        let result = await this.#tracedAttempt(run, entry, given, lock, slotStartedAt, cancel.fired);
        const delayMs =
          result.error && retryDelay && isRetryable(result.error, lock.reason, slot.signal)
            ? retryDelay({ attempt, error: result.error, jobName: entry.taskName, jobData: job.attrs.data })
            : null;
        if (delayMs === null) result = await lock.keptThrough(run, result);
        entry.attemptEnded(run.journal, result.error, new Date(run.startedAt.getTime() + result.durationMs));
        this.#deps.hooks.runFinished?.(run, { ...result, final: delayMs === null });
        if (!result.error) {
          entry.settle("succeeded");
          return;
        }
        if (delayMs === null) {
          entry.settle(result.outcome === "lock-lost" ? "lock-lost" : "failed", result.error.message);
          throw result.error;
        }
        await this.#beforeRetry(entry, run, result.error, delayMs, slot.signal, lock);
      }
    } finally {
      cancel.clear();
    }
  }

  /**
   * One attempt in its span (src/observability/tracing.ts), ended with the attempt's outcome; an
   * interrupted attempt ends the run here (thrown, see #endOfInterruption).
   */
  async #tracedAttempt(
    run: EngineRun,
    entry: SlotRun,
    given: HandlerTurn,
    lock: RunLock,
    slotStartedAt: Date,
    overlapCancelled: () => boolean,
  ): Promise<Omit<RunResult, "final">> {
    const span = this.#startSpan(entry, run);
    let result: Omit<RunResult, "final"> | undefined;
    try {
      result = await this.#attempt(run, entry, given, { lock, slotStartedAt, span });
      this.#endOfInterruption(entry, run, result, overlapCancelled());
    } catch (error) {
      span.end(result ? "interrupted" : "failed", toError(error));
      throw error;
    }
    span.end(result.error ? "failed" : "succeeded", result.error);
    return result;
  }

  /** The attempt's span: its rows carry its traceparent; a downstream's links to its upstreams'. */
  #startSpan(entry: SlotRun, run: EngineRun): RunSpan {
    const span = (this.#deps.tracer ?? NO_RUN_TRACING).startAttempt({
      task: run.taskName,
      scheduledAt: run.scheduledAt,
      runKey: `${run.taskName}@${isoTime(run.scheduledAt)}`,
      attempt: run.attempt,
      trigger: run.trigger,
      rerunOfTraceparent: run.rerunOf?.traceparent,
      upstreams: run.upstreams,
    });
    entry.traced(span.traceparent);
    return span;
  }

  /** One attempt's view of the run, for the handler and the hooks. */
  #engineRun(
    entry: SlotRun,
    attempt: number,
    startedAt: Date | undefined,
    slot: AbortController,
    withDownstream: boolean,
  ): EngineRun {
    return {
      taskName: entry.taskName,
      jobId: entry.jobId,
      scheduledAt: entry.scheduledAt,
      startedAt: startedAt ?? new Date(this.#clock.now()),
      attempt,
      trigger: entry.trigger ?? "schedule",
      ...(entry.requestedBy === undefined ? {} : { requestedBy: entry.requestedBy }),
      signal: slot.signal,
      rerunOf: entry.rerunOf,
      journal: new RunJournal(this.#clock),
      ...(entry.upstreams ? { upstreams: entry.upstreams } : {}),
      ...(withDownstream ? { withDownstream: true } : {}),
    };
  }

  /**
   * An attempt that failed because it was interrupted ends the run here (thrown): cancelled by the
   * next slot (overlap cancelRunning: not a failure of the task, no alert), or cut off at shutdown
   * (recorded interrupted, not final: another instance re-runs the slot).
   */
  #endOfInterruption(
    entry: SlotRun,
    run: EngineRun,
    result: Omit<RunResult, "final">,
    overlapCancelled: boolean,
  ): void {
    const { logger, hooks } = this.#deps;
    if (overlapCancelled && result.error && !entry.cutOffAtShutdown) {
      const detail = `cancelled when the next slot came due (overlap: cancelRunning): ${result.error.message}`;
      entry.settle("interrupted", detail);
      logger.info({ task: entry.taskName, slot: entry.scheduledAt }, `run ${detail}`);
      throw new Error(detail);
    }
    if (!entry.cutOffAtShutdown) return;
    if (!result.error) {
      entry.endedAfterCutOff();
      return;
    }
    const detail = `cut off at shutdown after the drain timeout (${result.error.message}); handed to another instance, which re-runs the slot`;
    entry.settle("interrupted", detail);
    logger.warn({ task: entry.taskName, slot: entry.scheduledAt }, `run interrupted: ${detail}`);
    hooks.runFinished?.(run, { ...result, outcome: "interrupted", error: new Error(detail), final: false });
    throw new Error(detail);
  }

  /** A failed attempt with a retry to come: its row, the hook, and the wait (the lock lost or the shutdown end the slot). */
  async #beforeRetry(
    entry: SlotRun,
    run: EngineRun,
    error: Error,
    delayMs: number,
    signal: AbortSignal,
    lock: RunLock,
  ): Promise<void> {
    this.#deps.recorder.recordFailedAttempt(entry, {
      attempt: run.attempt,
      startedAt: run.startedAt,
      endedAt: entry.endedAt ?? new Date(this.#clock.now()),
      error,
      retryDelayMs: delayMs,
      ...(run.journal ? { journal: run.journal } : {}),
    });
    this.#deps.hooks.retryScheduled?.(run, error, delayMs);
    const waited = await Promise.race([
      this.#clock
        .sleep(delayMs, signal)
        .then(() => (signal.aborted ? ("shutdown" as const) : ("waited" as const))),
      lock.lost.then(() => "lost" as const),
    ]);
    if (waited === "waited") return;
    const reason =
      waited === "lost"
        ? `lock lost before retry ${run.attempt + 1}: ${lock.reason}`
        : "shutdown before the retry";
    entry.settle("failed", reason);
    throw new Error(`${error.message} (${reason})`);
  }

  /** Overlap cancelRunning: the handler's signal fires when the next slot comes due. */
  #cancelAtNextSlot(
    job: Job,
    slot: AbortController,
    slotStartedAt: Date,
    policy: StoredPolicy,
  ): { fired: () => boolean; clear: () => void } {
    let fired = false;
    const cancelTime = cancelAt(
      policy.overlap,
      slotStartedAt.getTime(),
      job.attrs.nextRunAt ? new Date(job.attrs.nextRunAt).getTime() : null,
    );
    const timer =
      cancelTime === undefined
        ? undefined
        : this.#clock.setTimeout(
            () => {
              fired = true;
              slot.abort(
                new Error(
                  `cancelled: the next slot is due at ${new Date(cancelTime).toISOString()} (overlap: cancelRunning)`,
                ),
              );
            },
            Math.max(0, cancelTime - this.#clock.now()),
          );
    return { fired: () => fired, clear: () => this.#clock.clearTimeout(timer) };
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
    const giveUpAt = this.#clock.monotonic() + (this.#deps.startAheadMs ?? 0) + WAIT_SLACK_MS;
    let lost = false;
    void lockLost.then(() => {
      lost = true;
    });
    for (let step = slotWaitStep(at - this.#clock.now()); step !== "done" && !lost && !signal.aborted; ) {
      const bound = giveUpAt - this.#clock.monotonic();
      if (bound <= 0) return;
      if (step === "turn") await new Promise<void>((resolve) => setImmediate(resolve));
      else
        await Promise.race([this.#clock.sleep(Math.min(step.timerMs, Math.ceil(bound)), signal), lockLost]);
      step = slotWaitStep(at - this.#clock.now());
    }
  }

  /**
   * One attempt of the handler, supervised (src/engine/runSupervisor.ts). A handler started at its
   * slot puts its bookkeeping (its start row, the log line, the events) off until the others woken
   * for the same instant have started (QUIET_AFTER_SLOT_MS); one started later does not wait.
   */
  async #attempt(
    run: EngineRun,
    entry: SlotRun,
    given: HandlerTurn,
    { lock, slotStartedAt, span }: { lock: RunLock; slotStartedAt: Date; span: RunSpan },
  ): Promise<Omit<RunResult, "final">> {
    const { hooks, logger, recorder } = this.#deps;
    const { handler, options, slot } = given;
    entry.attemptStarted(run.attempt, run.startedAt);
    const quietMs =
      run.attempt === 1 && entry.handlerAt !== undefined
        ? Math.max(0, entry.handlerAt.getTime() + QUIET_AFTER_SLOT_MS - slotStartedAt.getTime())
        : 0;
    // with retries, each attempt has its own signal, so that a timed-out attempt's abort does not
    // abort the next; a slot of one attempt aborts the slot's own (one controller less per run)
    const attempt = options.retry ? new AbortController() : slot;
    const slotSignal = slot.signal;
    const forward = () => attempt.abort(slotSignal.reason);
    if (attempt !== slot) slotSignal.addEventListener("abort", forward, { once: true });
    try {
      const attemptRun = attempt === slot ? run : { ...run, signal: attempt.signal };
      return await superviseRun({
        // the span's context is active in the handler: the spans it starts nest under it
        run: () => span.within(() => handler(attemptRun)),
        // after the handler's call (in the same turn, or after the quiet spell): the slot's time is
        // the handler's, and the start row, the log line and the events still come before
        // anything the run ends with
        started: () => {
          if (run.attempt === 1) recorder.recordStart(entry);
          hooks.runStarted?.(attemptRun);
        },
        quietMs,
        clock: this.#clock,
        abort: (error) => attempt.abort(error),
        lockLost: lock.lost,
        timeoutMs: options.timeoutMs,
        graceMs: this.#deps.timeoutGraceMs,
        taskName: run.taskName,
        startedAt: run.startedAt,
        onLockLost: (reason) => lock.reportLost(attemptRun, reason),
        onAbandoned: (reason) => {
          logger.error({ task: run.taskName, slot: run.scheduledAt, reason }, `run abandoned: ${reason}`);
          hooks.abandoned?.(attemptRun, reason);
        },
      });
    } finally {
      if (attempt !== slot) slotSignal.removeEventListener("abort", forward);
    }
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

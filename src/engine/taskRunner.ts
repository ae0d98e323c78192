import { setTimeout as sleep } from "node:timers/promises";
import { exponential, type Job } from "agenda";
import type { Pool } from "pg";
import type { UpstreamRun } from "../core/dependencies/spec.js";
import type { Logger } from "../core/logger.js";
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
import type { RunEntry, RunLedger } from "./runLedger.js";
import type { RunRecorder } from "./runRecorder.js";
import { LockLostError, RunTimeoutError, superviseRun } from "./runSupervisor.js";
import * as sql from "./sql.js";
import { DatabaseUnreachableBeforeStartError } from "./staleStart.js";
import type { Watchdog } from "./watchdog.js";

export interface TaskRunnerDeps {
  pool: Pool;
  ledger: RunLedger;
  watchdog: Watchdog;
  recorder: RunRecorder;
  logger: Logger;
  hooks: EngineHooks;
  timeoutGraceMs: number;
  lockLifetimeMs: number;
  /** Task dependencies: a downstream run's upstream runs, and manual runs with their downstreams. */
  dependencies?: {
    beforeRun(
      taskName: string,
      slot: Date,
      options: { withDownstream: boolean; downstream: boolean },
    ): Promise<UpstreamRun[] | undefined>;
  };
}

/** The runs in progress on this instance, by job id: the drain aborts them at its deadline. */
export type RunningRuns = Map<string, { taskName: string; controller: AbortController }>;

const DEFAULT_RETRY_DELAY_MS = 1_000;
const DEFAULT_RETRY_MAX_DELAY_MS = 60_000;

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

  constructor(deps: TaskRunnerDeps, running: RunningRuns) {
    this.#deps = deps;
    this.#running = running;
  }

  async run(taskName: string, job: Job, handler: RunHandler, options: TaskDefinitionOptions): Promise<void> {
    const { ledger, logger } = this.#deps;
    const jobId = String(job.attrs._id);
    const slotStartedAt = new Date();
    const entry = ledger.starting(jobId, slotStartedAt, 1);
    const prepared = await this.#beforeHandler(taskName, job, entry, slotStartedAt);
    if (prepared.kind !== "run") return;
    const { rerunOf } = prepared;
    if (rerunOf?.scheduledAt) entry.scheduledAt = rerunOf.scheduledAt;
    entry.rerun = rerunOf !== undefined;
    entry.rerunOf = rerunOf;

    const slot = new AbortController(); // shutdown past the drain deadline
    this.#running.set(jobId, { taskName, controller: slot });
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
      lockedAt: entry.heldLockAt ?? slotStartedAt,
      onRenewed: (lockedAt) => {
        ledger.renewed(jobId, lockedAt);
        job.attrs.lockedAt = lockedAt; // Agenda's own expiry check reads this
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

    try {
      for (let attempt = 1; ; attempt++) {
        const run: EngineRun = {
          taskName,
          jobId,
          scheduledAt: entry.scheduledAt,
          startedAt: attempt === 1 ? slotStartedAt : new Date(),
          attempt,
          trigger: entry.trigger ?? "schedule",
          ...(entry.requestedBy === undefined ? {} : { requestedBy: entry.requestedBy }),
          signal: slot.signal,
          rerunOf,
          journal: new RunJournal(),
          ...(entry.upstreams ? { upstreams: entry.upstreams } : {}),
          ...(prepared.withDownstream ? { withDownstream: true } : {}),
        };
        entry.attempt = attempt;
        entry.startedAt = run.startedAt;
        if (attempt === 1) this.#deps.recorder.recordStart(jobId, taskName);
        const result = await this.#attempt(run, handler, options, lockLost, slot.signal);
        if (entry.handedOff) {
          if (!result.error)
            entry.handedOff = false; // it finished after all: an ordinary end
          else {
            const detail = `cut off at shutdown after the drain timeout (${result.error.message}); handed to another instance, which re-runs the slot`;
            ledger.settle(jobId, "interrupted", detail);
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
        entry.journal = run.journal;
        entry.error = result.error;
        const delayMs =
          result.error && retryDelay && isRetryable(result.error, lockLostReason, slot.signal)
            ? retryDelay({ attempt, error: result.error, jobName: taskName, jobData: job.attrs.data })
            : null;
        this.#deps.hooks.runFinished?.(run, { ...result, final: delayMs === null });
        if (!result.error) {
          ledger.settle(jobId, "succeeded");
          return;
        }
        if (delayMs === null) {
          ledger.settle(jobId, "failed", result.error.message);
          throw result.error;
        }
        this.#deps.recorder.recordFailedAttempt(jobId, taskName, {
          attempt,
          startedAt: run.startedAt,
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
          ledger.settle(jobId, "failed", reason);
          throw new Error(`${result.error.message} (${reason})`);
        }
      }
    } finally {
      await stopWatchdog();
      this.#running.delete(jobId);
    }
  }

  /**
   * The checks and reads between the lock and the handler (docs/design.md, "A run's path before
   * its handler"): the skip check, the run-now mark, and for a takeover the dead run and whether it
   * had finished its slot. Each database call is retried while the database is unreachable, as long
   * as the lock lasts; past that the run did not start: it is released untouched, never a failure.
   */
  async #beforeHandler(
    taskName: string,
    job: Job,
    entry: RunEntry,
    slotStartedAt: Date,
  ): Promise<
    | { kind: "skipped" | "finished" }
    | { kind: "run"; rerunOf: PreviousRun | undefined; withDownstream: boolean }
  > {
    const { ledger, logger, pool } = this.#deps;
    const jobId = String(job.attrs._id);
    const lockedAt = entry.heldLockAt?.getTime() ?? slotStartedAt.getTime();
    const deadline = lockedAt + this.#deps.lockLifetimeMs - START_MARGIN_MS;
    const beforeStart = <T>(query: () => Promise<T>) =>
      retryWhileDisconnected(query, {
        ...BEFORE_START_RETRY,
        maxElapsedMs: Math.max(0, deadline - Date.now()),
      });
    try {
      const skipReason = await this.#whySkip(jobId, job, beforeStart);
      if (skipReason) {
        ledger.settle(jobId, "skipped", skipReason);
        logger.info({ task: taskName, slot: entry.scheduledAt, reason: skipReason }, "run skipped");
        return { kind: "skipped" };
      }
      const manual = manualRunOf(job.attrs.data);
      if (manual) await beforeStart(() => sql.clearManualRun(pool, jobId));
      entry.trigger = manual ? "manual" : "schedule";
      entry.requestedBy = manual?.by;
      const withDownstream = manual?.withDownstream === true;
      const downstream =
        typeof job.attrs.data === "object" && job.attrs.data !== null && "after" in job.attrs.data;
      const upstreamsOf = async (slot: Date) => {
        entry.upstreams = await beforeStart(
          () =>
            this.#deps.dependencies?.beforeRun(taskName, slot, { withDownstream, downstream }) ??
            Promise.resolve(undefined),
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
        (await beforeStart(() => this.#previousRun(jobId, job.attrs.lastRunAt ?? slotStartedAt)));
      const slot = rerunOf.scheduledAt;
      const since = rerunOf.startedAt;
      if (slot && (await beforeStart(() => sql.slotHasOutcome(pool, taskName, slot, since)))) {
        // the run that died had finished and recorded its slot; only its end was not saved
        entry.slotAlreadyFinished = true;
        entry.recorded = true; // Agenda's outcome row for this non-run is not written
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
      entry.notStarted = true; // the final save gives the slot back (CronwardenJobRepository)
      throw new DatabaseUnreachableBeforeStartError(taskName, error as Error);
    }
  }

  async #attempt(
    run: EngineRun,
    handler: RunHandler,
    options: TaskDefinitionOptions,
    lockLost: Promise<string>,
    slotSignal: AbortSignal,
  ): Promise<Omit<RunResult, "final">> {
    const { hooks, logger } = this.#deps;
    const attempt = new AbortController();
    const forward = () => attempt.abort(slotSignal.reason);
    slotSignal.addEventListener("abort", forward, { once: true });
    try {
      const attemptRun = { ...run, signal: attempt.signal };
      hooks.runStarted?.(attemptRun);
      return await superviseRun({
        run: () => handler(attemptRun),
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
      slotSignal.removeEventListener("abort", forward);
    }
  }

  /**
   * Agenda pre-locks jobs due within one poll; the config may have changed since. The save that
   * Agenda makes just before the handler reads the row back; without it, the row is read here.
   */
  async #whySkip(
    jobId: string,
    job: Job,
    beforeStart: <T>(query: () => Promise<T>) => Promise<T>,
  ): Promise<string | undefined> {
    const guard =
      this.#deps.ledger.takeRowAtStart(jobId) ??
      (await beforeStart(() => sql.selectRunGuard(this.#deps.pool, jobId)));
    if (!guard) return "the job row no longer exists";
    if (guard.disabled) return "the task was disabled after this slot was locked";
    // a takeover re-runs a slot that already started under its schedule: a re-timing since then
    // decides the next slot, not whether this one is finished
    if (this.#deps.ledger.get(jobId)?.previousRunUnfinished) return undefined;
    if (
      guard.repeat_interval !==
        (job.attrs.repeatInterval == null ? null : String(job.attrs.repeatInterval)) ||
      guard.repeat_timezone !== (job.attrs.repeatTimezone ?? null)
    ) {
      return `the schedule changed to "${guard.repeat_interval}" (${guard.repeat_timezone}) after this slot was locked; the next run follows the new schedule`;
    }
    return undefined;
  }

  /** The run that died: the last start recorded before this run's own. */
  async #previousRun(jobId: string, before: Date): Promise<PreviousRun> {
    const row = await sql.selectLastStart(this.#deps.pool, jobId, before);
    const scheduledAt = typeof row?.meta?.scheduledAt === "string" ? new Date(row.meta.scheduledAt) : null;
    const instanceId =
      typeof row?.meta?.instanceId === "string" ? row.meta.instanceId : (row?.agenda_name ?? null);
    return { scheduledAt, startedAt: row?.timestamp ?? before, instanceId };
  }
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

import type { Job } from "agenda";
import type { Pool } from "pg";
import type { Clock } from "../core/clock.js";
import type { UpstreamRun } from "../core/dependencies/spec.js";
import type { Logger } from "../core/logger.js";
import { calendarsOf, excludedBy, exclusionReason } from "../core/policies/calendar.js";
import { POLICY_DATA_KEY } from "../core/policies/catchUpAtStart.js";
import { isConnectionError, retryWhileDisconnected } from "../db/retry.js";
import type { PreviousRun } from "./engineApi.js";
import { BEFORE_START_RETRY } from "./jobRepository.js";
import { decodeRunMeta } from "./runLogMeta.js";
import type { SkippedSlots } from "./skippedSlots.js";
import { RUN_DATA_KEY, runOfRow, type SlotRun } from "./slotRun.js";
import * as sql from "./sql.js";
import { DatabaseUnreachableBeforeStartError, PausedBeforeStartError } from "./staleStart.js";

export interface RunChecksDeps {
  pool: Pool;
  logger: Logger;
  lockLifetimeMs: number;
  clock: Clock;
  skipped: SkippedSlots;
  /** Whether the namespace's pause-all switch is on (src/engine/pauseGate.ts). */
  paused?: () => boolean;
  /** Task dependencies: a downstream run's upstream runs, and manual runs with their downstreams. */
  dependencies?: {
    beforeRun(
      taskName: string,
      slot: Date,
      options: { withDownstream: boolean; downstream: boolean },
    ): Promise<UpstreamRun[] | undefined>;
  };
}

/** What the checks before the handler decided: the run goes on, or the slot is skipped or already finished. */
export type BeforeHandler =
  | { kind: "skipped" | "finishedByDeadRun" }
  | { kind: "run"; rerunOf: PreviousRun | undefined; withDownstream: boolean };

type BeforeStart = <T>(query: () => Promise<T>) => Promise<T>;

/**
 * The checks and reads between a run's start save and its handler (docs/design.md, "A run's path
 * before its handler"): the catch-up decision, the skip check, the run-now mark, a downstream's
 * upstreams, and for a takeover the dead run and whether it had finished its slot. Each database
 * call is retried while the database is unreachable, up to the run's start deadline; past that
 * the run did not start (DatabaseUnreachableBeforeStartError): its slot is given back untouched,
 * never a failure.
 */
export class RunChecks {
  readonly #deps: RunChecksDeps;

  constructor(deps: RunChecksDeps) {
    this.#deps = deps;
  }

  /** Whether the namespace's pause-all switch is on now (asked again just before the handler, src/engine/taskRunner.ts). */
  pausedNow(): boolean {
    return this.#deps.paused?.() === true;
  }

  async beforeHandler(run: SlotRun, job: Job, preparedAt: Date): Promise<BeforeHandler> {
    const { logger, pool, clock } = this.#deps;
    const deadline = run.startDeadline(this.#deps.lockLifetimeMs, preparedAt.getTime());
    const beforeStart: BeforeStart = (query) =>
      retryWhileDisconnected(query, {
        ...BEFORE_START_RETRY,
        clock,
        maxElapsedMs: Math.max(0, deadline - clock.now()),
      });
    // pause-all: the slot goes back untouched (no skip record, no catch-up decided), to be decided
    // by the task's catchUp once the switch is off (docs/operations.md, "Pause all")
    if (this.#deps.paused?.()) throw new PausedBeforeStartError(run.taskName);
    try {
      if (!this.#deps.skipped.catchUp(run)) return { kind: "skipped" };
      const skipReason = await this.#whySkip(run, job, beforeStart);
      if (skipReason) {
        run.settle("skipped", skipReason);
        logger.info({ task: run.taskName, slot: run.scheduledAt, reason: skipReason }, "run skipped");
        return { kind: "skipped" };
      }
      const manual = manualRunOf(job.attrs.data);
      if (manual) await beforeStart(() => sql.clearManualRun(pool, run.jobId));
      // an operator's re-run runs under the slot it repeats (src/operations/slotReruns.ts)
      run.triggeredBy(manual?.rerun ? "rerun" : manual ? "manual" : "schedule", manual?.by);
      const withDownstream = manual?.withDownstream === true;
      if (!run.previousRunUnfinished) {
        const slot = manual?.rerun?.scheduledAt ?? run.scheduledAt;
        await this.#upstreams(run, job, slot, withDownstream, beforeStart);
        return { kind: "run", rerunOf: manual?.rerun, withDownstream };
      }
      return await this.#takeover(run, job, preparedAt, withDownstream, beforeStart);
    } catch (error) {
      if (!isConnectionError(error)) throw error;
      throw new DatabaseUnreachableBeforeStartError(run.taskName, error as Error);
    }
  }

  /** A takeover re-runs the dead run's slot, unless the dead run had recorded its outcome. */
  async #takeover(
    run: SlotRun,
    job: Job,
    preparedAt: Date,
    withDownstream: boolean,
    beforeStart: BeforeStart,
  ): Promise<BeforeHandler> {
    // the dead run's identity is in the job row since its start save; rows from before that
    // are read from the run log's last start row
    const rerunOf =
      run.deadRun ??
      (await beforeStart(() => this.#previousRun(run.jobId, job.attrs.lastRunAt ?? preparedAt)));
    const slot = rerunOf.scheduledAt;
    const since = rerunOf.startedAt;
    if (slot && (await beforeStart(() => sql.slotHasOutcome(this.#deps.pool, run.taskName, slot, since)))) {
      // the run that died had finished and recorded its slot; only its end was not saved
      run.finishedByDeadRun();
      this.#deps.logger.info(
        { task: run.taskName, slot, rerunOf },
        "not re-run: the run that died had already recorded the outcome of its slot; its end is saved now",
      );
      return { kind: "finishedByDeadRun" };
    }
    await this.#upstreams(run, job, slot ?? run.scheduledAt, withDownstream, beforeStart);
    return { kind: "run", rerunOf: await this.#traced(run.jobId, rerunOf), withDownstream };
  }

  /**
   * The run that died with the traceparent its start row recorded, for the re-run's span link
   * (docs/tracing.md). Best effort: the re-run goes on without it.
   */
  async #traced(jobId: string, rerunOf: PreviousRun): Promise<PreviousRun> {
    if (rerunOf.traceparent || !rerunOf.scheduledAt) return rerunOf;
    const query = { jobId, slot: rerunOf.scheduledAt, instanceId: rerunOf.instanceId };
    try {
      const traceparent = await sql.selectStartTraceparent(this.#deps.pool, query);
      return traceparent ? { ...rerunOf, traceparent } : rerunOf;
    } catch (error) {
      this.#deps.logger.debug({ err: error, jobId }, "could not read the traceparent of the run that died");
      return rerunOf;
    }
  }

  /** A downstream's upstream runs, or a manual run's downstreams to queue (docs/dependencies.md). */
  async #upstreams(
    run: SlotRun,
    job: Job,
    slot: Date,
    withDownstream: boolean,
    beforeStart: BeforeStart,
  ): Promise<void> {
    const data = job.attrs.data;
    const downstream = typeof data === "object" && data !== null && "after" in data;
    // a task with its own schedule, not asked to run its downstreams: nothing to ask
    if (!withDownstream && !downstream) return;
    const dependencies = this.#deps.dependencies;
    run.waitedFor(
      await beforeStart(
        () =>
          dependencies?.beforeRun(run.taskName, slot, { withDownstream, downstream }) ??
          Promise.resolve(undefined),
      ),
    );
  }

  /**
   * The claim locked the job ahead of its slot; the config may have changed since. The start
   * save reads the row back; without it, the row is read here.
   */
  async #whySkip(run: SlotRun, job: Job, beforeStart: BeforeStart): Promise<string | undefined> {
    const guard =
      run.takeRowAtStart() ?? (await beforeStart(() => sql.selectRunGuard(this.#deps.pool, run.jobId)));
    if (!guard) return "the job row no longer exists";
    if (guard.disabled) return "the task was disabled after this slot was locked";
    // a takeover re-runs a slot that already started under its schedule: a re-timing since then
    // decides the next slot, not whether this one is finished
    if (run.previousRunUnfinished) return undefined;
    const repeat = job.attrs.repeatInterval;
    if (
      guard.repeat_interval !== (repeat === undefined || repeat === null ? null : String(repeat)) ||
      guard.repeat_timezone !== (job.attrs.repeatTimezone ?? null)
    ) {
      return `the schedule changed to "${guard.repeat_interval}" (${guard.repeat_timezone}) after this slot was locked; the next run follows the new schedule`;
    }
    return excludedSlot(run, job);
  }

  /** The run that died: the last start recorded before this run's own. */
  async #previousRun(jobId: string, before: Date): Promise<PreviousRun> {
    const row = await sql.selectLastStart(this.#deps.pool, jobId, before);
    const meta = decodeRunMeta(row?.meta);
    const instanceId = meta.instanceId ?? row?.agenda_name ?? null;
    return {
      scheduledAt: meta.scheduledAt ?? null,
      startedAt: row?.timestamp ?? before,
      instanceId,
      ...(meta.traceparent ? { traceparent: meta.traceparent } : {}),
    };
  }
}

/**
 * A scheduled slot that a calendar of the task's `exclude` excludes (docs/calendars.md): recorded
 * skipped with the calendar's name. A run-now is an operator's explicit request: it runs.
 */
function excludedSlot(run: SlotRun, job: Job): string | undefined {
  const data = job.attrs.data as Record<string, unknown> | undefined;
  if (manualRunOf(data)) return undefined;
  const policy = data?.[POLICY_DATA_KEY] as Record<string, unknown> | undefined;
  const calendars = calendarsOf(policy?.exclude);
  const timezone = job.attrs.repeatTimezone ?? "UTC";
  const calendar = excludedBy(calendars, run.scheduledAt.getTime(), timezone);
  return calendar === undefined ? undefined : exclusionReason(calendar);
}

/**
 * The run-now request the job row carries, if any, with who asked (absent in rows from older
 * versions); for a re-run, the slot it repeats and that slot's last run (`rerun`, the same shape
 * as a start save's identity: src/engine/slotRun.ts runOfRow).
 */
export function manualRunOf(
  data: unknown,
): { by: string | undefined; withDownstream: boolean; rerun: PreviousRun | undefined } | undefined {
  if (typeof data !== "object" || data === null || !("manualRun" in data)) return undefined;
  const request = (data as { manualRun: unknown }).manualRun;
  const fields = typeof request === "object" && request !== null ? (request as Record<string, unknown>) : {};
  return {
    by: typeof fields.by === "string" ? fields.by : undefined,
    withDownstream: fields.withDownstream === true,
    rerun: runOfRow({ [RUN_DATA_KEY]: fields.rerun }),
  };
}

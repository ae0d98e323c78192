import type { Job } from "agenda";
import type { Clock } from "../core/clock.js";
import type { Logger } from "../core/logger.js";
import { POLICY_DATA_KEY, type StoredPolicy, slotSource } from "../core/policies/catchUpAtStart.js";
import { dueAt, slotOfDue } from "../core/policies/jitter.js";
import { decideOverlapAtEnd } from "../core/policies/overlap.js";
import { nextSlot, rowSchedule, slotsBetween } from "../core/policies/schedule.js";
import type { EngineHooks } from "./engineApi.js";
import type { RunRecorder } from "./runRecorder.js";
import type { SlotRun } from "./slotRun.js";

export interface SkippedSlotsDeps {
  recorder: Pick<RunRecorder, "recordSkippedSlots">;
  logger: Logger;
  hooks: EngineHooks;
  clock: Clock;
}

/** One policy decision's skipped slots, as the policies in src/core/policies/ return them. */
interface SkipDecision {
  skipped: number[];
  skippedCount: number;
  atLeast: boolean;
  reason: string;
}

/**
 * The slots a policy decides not to run, for one run: the catch-up decision of its start save and
 * the overlap decision at its end. Each decision is one skipped run record per listed slot, one
 * log line and one hook call (not one per slot).
 */
export class SkippedSlots {
  readonly #deps: SkippedSlotsDeps;

  constructor(deps: SkippedSlotsDeps) {
    this.#deps = deps;
  }

  /**
   * The catch-up decision of the run's start save (src/core/policies/catchUp.ts): records the
   * slots it skipped. False: nothing runs now (the run's own record is the first skipped slot).
   */
  catchUp(run: SlotRun): boolean {
    const decision = run.catchUp;
    if (decision?.kind !== "catch-up") return true;
    const { run: runs, skipped, reason } = decision;
    // without a run, the run's own outcome row records the first skipped slot
    void this.#report(run, "catchUp", decision, runs === null ? skipped.slice(1) : skipped, runs);
    if (runs !== null) return true;
    run.settle("skipped", reason);
    return false;
  }

  /**
   * The overlap decision at a run's end (src/core/policies/overlap.ts): the slots that fell due
   * while it ran are recorded skipped, and for `skip` the next run moves to the first slot after
   * now (`job.attrs.nextRunAt`, written by the run's final save).
   */
  async overlapAtEnd(run: SlotRun, job: Job, startedAt: Date, policy: StoredPolicy): Promise<void> {
    const taskName = run.taskName;
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
      // the start save's time, at which the pending slot was computed: a save slow enough to end
      // past that slot must not make it look owed by catch-up, and leave the slots the run
      // covered without a record
      const decision = decideOverlapAtEnd({
        policy: policy.overlap,
        runStartedAt: Math.min(job.attrs.lastRunAt?.getTime() ?? startedAt.getTime(), startedAt.getTime()),
        handlerStartedAt: startedAt.getTime(),
        // the run's own slot (a re-run's: the slot it repeats): a run that took it late is not
        // "still going" for the slots that fell due only because of that
        slotDueAt:
          run.trigger === "manual"
            ? run.scheduledAt.getTime()
            : dueAt(taskName, run.scheduledAt.getTime(), jitterMs),
        ...(run.rerun ? { rerunOf: { slot: run.scheduledAt.getTime() } } : {}),
        now: this.#deps.clock.now(),
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
      await this.#report(run, "overlap", decision, decision.skipped, decision.runs);
    } catch (error) {
      this.#deps.logger.warn(
        { err: error, task: taskName },
        "could not apply the overlap policy; the next run computed at the start stands",
      );
    }
  }

  /** A skipped run record for each listed slot (`recorded`), one log line and one hook call. */
  #report(
    run: SlotRun,
    policy: "catchUp" | "overlap",
    decision: SkipDecision,
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
      run,
      recorded.map((slot) => new Date(slot)),
      reason,
      more,
    );
    const skippedSlots = {
      taskName: run.taskName,
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
        task: run.taskName,
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
}

import type { JobParameters } from "agenda";
import type { Pool } from "pg";
import type { Clock } from "../core/clock.js";
import { POLICY_DATA_KEY, planRunStart } from "../core/policies/catchUpAtStart.js";
import {
  decidePause,
  errorSummary,
  type PauseMark,
  pauseOfData,
  storedPause,
  streakOfData,
  thresholdOf,
} from "../core/policies/pauseOnFailure.js";
import { nextSlot, rowSchedule } from "../core/policies/schedule.js";
import { redactSecrets } from "../observability/redact.js";
import { type RowAtStart, runOfRow, type SlotRun } from "./slotRun.js";
import { inTransaction, saveJobRow, selectEndState } from "./sql.js";

/**
 * The policies that the job rows' writes (src/engine/jobRepository.ts) apply at a run's start
 * and end: catch-up and the next slot at the start save, the pause on failure at the final save.
 * The decisions are the pure ones of src/core/policies/; here they meet a job document and a row.
 */

/**
 * Policies at a run's start (src/core/policies/catchUpAtStart.ts): which slot runs when slots
 * were missed (the run's slot, and the decision for the checks to record), and the next run
 * under the DST rule, written by this start save and by the run's final save.
 */
export function planStart(run: SlotRun, job: JobParameters, now: Date, graceMs: number): void {
  const data = job.data as Record<string, unknown> | undefined;
  const plan = planRunStart({
    taskName: job.name,
    cron: rowSchedule(
      job.repeatInterval === undefined || job.repeatInterval === null ? null : String(job.repeatInterval),
      data?.[POLICY_DATA_KEY] ?? null,
    ),
    timezone: job.repeatTimezone ?? null,
    data,
    storedSlot: run.scheduledAt,
    now: job.lastRunAt ?? now,
    graceMs,
    previousRunEndedAt: job.lastFinishedAt ?? null,
    previousRunSlot: runOfRow(data)?.scheduledAt ?? undefined,
    rerunOrManual: run.previousRunUnfinished || (data !== undefined && data !== null && "manualRun" in data),
  });
  if (!plan) return;
  // the slot, not its jittered due time (a re-run keeps the dead run's)
  const slot = run.previousRunUnfinished ? run.scheduledAt : plan.slot;
  run.planned(
    plan.decision,
    plan.decision.kind === "catch-up"
      ? new Date(plan.decision.run ?? plan.decision.skipped[0] ?? slot.getTime())
      : slot,
  );
  if (plan.nextRunAt) job.nextRunAt = plan.nextRunAt;
}

/**
 * The slot after a claimed job's due time, asked at the claim so that its start (planStart)
 * finds it known (src/core/policies/schedule.ts, nextCronSlot) instead of computing it between
 * the slot and the handler.
 */
export function knowSlotAfterDue(job: JobParameters): void {
  if (!job.nextRunAt || job.repeatInterval === undefined || job.repeatInterval === null) return;
  const data = job.data as Record<string, unknown> | undefined;
  const schedule = rowSchedule(String(job.repeatInterval), data?.[POLICY_DATA_KEY] ?? null);
  if (!schedule) return;
  try {
    nextSlot(schedule, job.repeatTimezone ?? "UTC", job.nextRunAt.getTime());
  } catch {
    // a timezone this runtime does not know: the start leaves the next run to Agenda
  }
}

/**
 * The save that ends a failed slot (or the first succeeded one after failures), with the pause
 * on failure decided under the row lock in the same transaction (src/core/policies/pauseOnFailure.ts):
 * the failure streak and, when it reaches the task's `pauseOnFailure`, the pause (row disabled,
 * marked) are written by the save itself, so the save cannot undo the pause, and only the
 * holder of the lock (one instance, one save per slot) can pause: once. Throws when the lock is
 * no longer this run's.
 */
export async function saveSlotEnd(
  db: Pool,
  clock: Clock,
  run: SlotRun,
  job: JobParameters,
  fence: Date[],
): Promise<{ row: RowAtStart; pause: PauseMark | undefined }> {
  const notHeld = () =>
    new Error(`job ${run.jobId} (${job.name}): not saved, this instance no longer holds its lock`);
  return inTransaction(db, async (client) => {
    const state = await selectEndState(client, run.jobId, fence);
    if (!state) throw notHeld();
    const data = state.data as Record<string, unknown> | null;
    const policy = data?.[POLICY_DATA_KEY] as Record<string, unknown> | undefined;
    const decision = decidePause({
      threshold: thresholdOf(policy?.pauseOnFailure),
      streak: streakOfData(data),
      outcome: run.outcome ?? "succeeded",
      paused: pauseOfData(data) !== undefined,
      disabled: state.disabled,
    });
    let pause: PauseMark | undefined;
    if (decision.pause) {
      const message = run.error?.message ?? run.detail;
      pause = {
        at: new Date(clock.now()),
        failures: decision.streak,
        slot: run.scheduledAt,
        lastError: errorSummary(message === undefined ? undefined : redactSecrets(message)),
      };
    }
    const saved = await saveJobRow(client, {
      job,
      lastModifiedBy: job.lastModifiedBy ?? null,
      fence,
      startingSlot: null,
      end: { streak: decision.streak, pause: pause ? storedPause(pause) : null },
    });
    if (!saved) throw notHeld();
    return { row: saved, pause };
  });
}

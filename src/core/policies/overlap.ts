import type { SlotSource } from "./catchUp.js";

/**
 * The overlap decision (docs/behaviour.md, "Overlap") as pure functions: what becomes of the slots
 * that fall due while a task's run is still going. Never two runs of one task at once under any
 * policy: the job row stays locked until the run settles. The engine applies the decision at the
 * run's end (src/engine/taskRunner.ts), before the save that releases the row.
 *
 * Two rules hold under every policy:
 * - a slot is "the previous run still going" only if the run would still have been going at it had
 *   it started on time (its slot's due time plus the run's duration). A slot that fell due only
 *   because the run started late (a hand-off or takeover re-run, a wait for a worker, a stalled
 *   event loop) is not the policy's: it is owed. The oldest owed slot runs next, and the catch-up
 *   decision at its start runs the others after it, in slot order (src/core/policies/catchUp.ts:
 *   slots that fell due while the previous run went on are decided by no one else);
 * - every slot the policy records skipped is older than every slot that runs after the run: no
 *   older slot runs after a newer one was recorded skipped.
 */

export type OverlapPolicy = "skip" | "queueOne" | "cancelRunning";

export const OVERLAP_POLICIES: readonly OverlapPolicy[] = ["skip", "queueOne", "cancelRunning"];

/**
 * The default. A run that outlasts its interval is the common case of overlap (a slow day of a
 * report): `skip` keeps the schedule's rhythm and never stacks late runs behind a slow one; a
 * task that must run once more after a long run says `queueOne`.
 */
export const DEFAULT_OVERLAP: OverlapPolicy = "skip";

export interface OverlapInput {
  policy: OverlapPolicy;
  /** When the run started: its start save, at which the pending slot was computed. */
  runStartedAt: number;
  /** When its handler began (its first attempt): the run's duration is counted from here. */
  handlerStartedAt?: number;
  /**
   * When the run's own slot was due (the slot plus its jitter; a run-now's: when it was asked for).
   * Absent: the run is taken to have started on time.
   */
  slotDueAt?: number;
  /**
   * The run repeats one that was cut off or died (a hand-off or takeover re-run) of the slot
   * `slot`: the slots after it that fell due before this run's start save were decided by no one,
   * and are this decision's too.
   */
  rerunOf?: { slot: number };
  now: number;
  /** The slot the row would run next (computed when the run started), or null: none. */
  pendingSlot: number | null;
  schedule: SlotSource;
}

export interface OverlapDecision {
  /** Slots that fell due and will not run, oldest first (at most `limit`); all older than `runs`. */
  skipped: number[];
  skippedCount: number;
  atLeast: boolean;
  /**
   * The slot that runs as soon as this run ends (already due), null: none. The newest overlapped
   * slot (queueOne, cancelRunning), else the oldest owed one; owed slots after it follow in order.
   */
  runs: number | null;
  /** When `runs` is null: the next slot is the first after this time. */
  nextAfter: number | undefined;
  reason: string;
}

const LISTED = 100;
const COUNTED = 10_000;

const REASONS: Record<OverlapPolicy, string> = {
  skip: "fell due while the previous run was still going; overlap is skip",
  queueOne:
    "fell due while the previous run was still going; overlap is queueOne: only the newest of them runs, after it",
  cancelRunning:
    "fell due while the previous run was being cancelled; overlap is cancelRunning: only the newest of them runs",
};

export function decideOverlapAtEnd(input: OverlapInput): OverlapDecision | undefined {
  const { policy, runStartedAt, now, pendingSlot, schedule } = input;
  if (pendingSlot === null) return undefined;
  // the pending slot was already owed before the run started (catchUp: all): the catch-up policy's
  if (input.rerunOf === undefined && pendingSlot <= runStartedAt) return undefined;
  const from = input.rerunOf === undefined ? pendingSlot : Math.min(pendingSlot, input.rerunOf.slot + 1);
  const newest = schedule.newestAtOrBefore(now);
  // nothing fell due during the run
  if (newest === undefined || newest < from) return undefined;
  // had the run started on time, it would have ended `late` ms earlier: the slots after that
  // end fell due only because it started late, and are owed, not the policy's
  const late =
    input.handlerStartedAt !== undefined && input.slotDueAt !== undefined
      ? Math.max(0, input.handlerStartedAt - input.slotDueAt)
      : 0;
  const onTimeEnd = now - late;
  const overlapped = schedule.newestAtOrBefore(onTimeEnd);
  const newestOverlapped = overlapped !== undefined && overlapped >= from ? overlapped : undefined;
  const oldestOwed = schedule.between(Math.max(from, Math.floor(onTimeEnd) + 1), newest, 1).slots[0];
  // queueOne and cancelRunning run the newest overlapped slot (the owed ones follow it in order);
  // skip runs none of them
  const runs = policy !== "skip" && newestOverlapped !== undefined ? newestOverlapped : (oldestOwed ?? null);
  const skippedUntil = runs === null ? now : runs - 1;
  const listed = schedule.between(from, skippedUntil, LISTED);
  // the pending slot is the one to run and nothing before it fell due: it just runs
  if (runs === pendingSlot && listed.slots.length === 0) return undefined;
  let skippedCount = listed.slots.length;
  let atLeast = false;
  if (!listed.complete) {
    const counted = schedule.between(from, skippedUntil, COUNTED);
    skippedCount = counted.slots.length;
    atLeast = !counted.complete;
  }
  return {
    skipped: listed.slots,
    skippedCount,
    atLeast,
    runs,
    nextAfter: runs === null ? now : undefined,
    reason: REASONS[policy],
  };
}

/** For cancelRunning: when the running handler's signal fires (the next slot's due time), if any. */
export function cancelAt(
  policy: OverlapPolicy,
  runStartedAt: number,
  pendingDue: number | null,
): number | undefined {
  if (policy !== "cancelRunning" || pendingDue === null || pendingDue <= runStartedAt) return undefined;
  return pendingDue;
}

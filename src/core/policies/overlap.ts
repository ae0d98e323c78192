import type { SlotSource } from "./catchUp.js";

/**
 * The overlap decision (docs/behaviour.md, "Overlap") as pure functions: what becomes of the slots
 * that fall due while a task's run is still going. Never two runs of one task at once under any
 * policy: the job row stays locked until the run settles. The engine applies the decision at the
 * run's end (src/engine/taskRunner.ts), before the save that releases the row.
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
  /**
   * When its handler began, if later than the start save (a slow save on a loaded machine). A
   * pending slot that fell due in between runs as soon as the run ends, as it would have had the
   * save been quick; only the slots after it are the policy's.
   */
  handlerStartedAt?: number;
  now: number;
  /** The slot the row would run next (computed when the run started), or null: none. */
  pendingSlot: number | null;
  schedule: SlotSource;
}

export interface OverlapDecision {
  /** Slots that fell due during the run and will not run, oldest first (at most `limit`). */
  skipped: number[];
  skippedCount: number;
  atLeast: boolean;
  /** The next slot is the first after this time; undefined: keep the pending slot (it runs now). */
  nextAfter: number | undefined;
  reason: string;
}

const LISTED = 100;
const COUNTED = 10_000;

export function decideOverlapAtEnd(input: OverlapInput): OverlapDecision | undefined {
  const { policy, runStartedAt, now, pendingSlot, schedule } = input;
  // nothing fell due during the run; or the pending slot was already owed before it started
  // (catchUp: all), which is the catch-up policy's
  if (pendingSlot === null || pendingSlot > now || pendingSlot <= runStartedAt) return undefined;
  const dueBeforeHandler = input.handlerStartedAt !== undefined && pendingSlot <= input.handlerStartedAt;
  if (dueBeforeHandler && schedule.between(pendingSlot + 1, now, 1).slots.length === 0) return undefined;
  const from = policy === "skip" && !dueBeforeHandler ? pendingSlot : pendingSlot + 1;
  const listed = schedule.between(from, now, LISTED);
  let skippedCount = listed.slots.length;
  let atLeast = false;
  if (!listed.complete) {
    const counted = schedule.between(from, now, COUNTED);
    skippedCount = counted.slots.length;
    atLeast = !counted.complete;
  }
  const reason =
    policy === "skip"
      ? "fell due while the previous run was still going; overlap is skip"
      : policy === "queueOne"
        ? "fell due while the previous run was still going; overlap is queueOne: only the first of them runs, after it"
        : "fell due while the previous run was being cancelled; overlap is cancelRunning: only the first of them runs";
  return {
    skipped: listed.slots,
    skippedCount,
    atLeast,
    nextAfter: policy === "skip" && !dueBeforeHandler ? now : undefined,
    reason,
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

import { createHash } from "node:crypto";

/**
 * Jitter (docs/behaviour.md, "Jitter"): a task's run for slot S starts at S + offset, where the
 * offset is a stable function of the task's name and the slot, in [0, jitterMs). A herd of tasks on
 * one cron spreads over the jitter; every instance computes the same start for the same slot, and
 * the run record keeps the slot (its `scheduledAt`) apart from the start. Pure.
 */
export function jitterOffset(taskName: string, slot: number, jitterMs: number): number {
  if (jitterMs <= 0) return 0;
  const digest = createHash("sha256")
    .update(`${taskName}@${new Date(slot).toISOString()}`)
    .digest();
  // 48 bits of the digest, scaled: uniform enough, and exact in a double
  return Math.floor((digest.readUIntBE(0, 6) / 2 ** 48) * jitterMs);
}

/** When the run of `slot` is due. */
export function dueAt(taskName: string, slot: number, jitterMs: number): number {
  return slot + jitterOffset(taskName, slot, jitterMs);
}

/**
 * The slot a stored due time belongs to: the slot S at or before it, within the jitter, with
 * S + offset(S) equal to it. `candidates` are the schedule's slots in (due - jitterMs, due],
 * newest first. Undefined: the due time is no jittered slot (a run-now, a row from before the
 * jitter was set, a hand edit): it stands as its own slot.
 */
export function slotOfDue(
  taskName: string,
  due: number,
  jitterMs: number,
  candidates: readonly number[],
): number | undefined {
  for (const slot of candidates) if (dueAt(taskName, slot, jitterMs) === due) return slot;
  return undefined;
}

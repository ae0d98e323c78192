import type { DesiredState, DesiredTask } from "../config/desiredState.js";
import { sameValue } from "../core/sameValue.js";

/**
 * Which tasks a new snapshot changed against the last one applied, when a reconcile may plan only
 * those (docs/design.md, "Reconcile choices"): an edit of one entry in a config of 100,000 then
 * reads and plans one row, not all of them. Undefined when the whole config must be planned: no
 * snapshot applied before (or its pass failed), entries refused in either snapshot (their errors
 * are reported per snapshot), a one-shot (its plan depends on the clock), or more than
 * `maxShare` of the tasks changed (one full read is then cheaper than many small ones).
 */
export function changedTasks(
  previous: DesiredState,
  desired: DesiredState,
  maxShare = 0.1,
): Set<string> | undefined {
  if (previous.rejected.length > 0 || desired.rejected.length > 0) return undefined;
  const before = new Map<string, DesiredTask>();
  for (const task of previous.tasks) {
    if (task.at !== undefined) return undefined;
    before.set(task.name, task);
  }
  const limit = Math.max(100, Math.ceil(Math.max(desired.tasks.length, previous.tasks.length) * maxShare));
  const changed = new Set<string>();
  for (const task of desired.tasks) {
    if (task.at !== undefined) return undefined;
    const old = before.get(task.name);
    before.delete(task.name);
    if (old && sameValue(old, task)) continue;
    changed.add(task.name);
    if (changed.size > limit) return undefined;
  }
  // left out of the new snapshot: disabled
  for (const name of before.keys()) changed.add(name);
  return changed.size > limit ? undefined : changed;
}

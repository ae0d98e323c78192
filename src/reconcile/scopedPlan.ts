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
  const [before, after] = [previous.tasks, desired.tasks];
  if (before.some((task) => task.at !== undefined) || after.some((task) => task.at !== undefined))
    return undefined;
  // an entry the config's memo answered with last time's task (src/config/entryMemo.ts) is the
  // same object at the same position: unchanged without a lookup. Names are unique in a snapshot
  // with no refused entry, so a name matched here is in neither list of the rest.
  const oldRest = new Map<string, DesiredTask>();
  const newRest: DesiredTask[] = [];
  for (let index = 0; index < Math.max(before.length, after.length); index++) {
    const [old, task] = [before[index], after[index]];
    if (old === task) continue;
    if (old) oldRest.set(old.name, old);
    if (task) newRest.push(task);
  }
  const limit = Math.max(100, Math.ceil(Math.max(after.length, before.length) * maxShare));
  const changed = new Set<string>();
  for (const task of newRest) {
    const old = oldRest.get(task.name);
    oldRest.delete(task.name);
    if (old && sameValue(old, task)) continue;
    changed.add(task.name);
    if (changed.size > limit) return undefined;
  }
  // left out of the new snapshot: disabled
  for (const name of oldRest.keys()) changed.add(name);
  return changed.size > limit ? undefined : changed;
}

import type { DesiredState, DesiredTask } from "../config/desiredState.js";

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

/** Deep equality of the plain values a DesiredTask holds (strings, numbers, booleans, arrays, objects, Dates). */
export function sameValue(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (typeof a !== "object" || typeof b !== "object" || a === null || b === null) return false;
  if (a instanceof Date || b instanceof Date)
    return a instanceof Date && b instanceof Date && a.getTime() === b.getTime();
  if (Array.isArray(a) !== Array.isArray(b)) return false;
  if (Array.isArray(a)) {
    const other = b as unknown[];
    return a.length === other.length && a.every((item, index) => sameValue(item, other[index]));
  }
  const left = a as Record<string, unknown>;
  const right = b as Record<string, unknown>;
  const keys = Object.keys(left).filter((key) => left[key] !== undefined);
  if (keys.length !== Object.keys(right).filter((key) => right[key] !== undefined).length) return false;
  return keys.every((key) => sameValue(left[key], right[key]));
}

/**
 * Deep equality of plain values as JSON and the config's validated shapes hold them (strings,
 * numbers, booleans, null, arrays, objects, Dates); an undefined key counts as an absent one.
 * For the config's "did this entry change" checks (src/config/entryMemo.ts, src/reconcile/scopedPlan.ts).
 */
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
  // no arrays of keys: a config of 100,000 entries compares every entry on each change
  let defined = 0;
  for (const key in left) {
    if (!Object.hasOwn(left, key) || left[key] === undefined) continue;
    if (!sameValue(left[key], right[key])) return false;
    defined++;
  }
  for (const key in right) if (Object.hasOwn(right, key) && right[key] !== undefined) defined--;
  return defined === 0;
}

import type { DesiredState } from "./desiredState.js";

/**
 * The fleet guard: a pure decision on a parsed snapshot, before it is accepted. A registered task
 * that a snapshot does not mention is disabled; a snapshot that leaves out most of the enabled tasks
 * at once is far more often a mistake (a truncated document, a wrong file, one misspelt name in a
 * one-task config) than an intent, and every instance would apply it. Such a snapshot is refused as
 * a whole, naming the tasks it would have disabled, unless it says `confirmDisableAll: true`.
 * Disabling with `enabled: false` is explicit and never counts.
 */

export interface FleetGuardOptions {
  /** Registered tasks whose job is enabled now. */
  enabledNow: ReadonlySet<string>;
  registered: ReadonlySet<string>;
  /** Refuse when the snapshot leaves out more than this share of the enabled tasks (0-1). */
  maxDisableShare: number;
}

export const DEFAULT_MAX_DISABLE_SHARE = 0.5;

/** Returns why the snapshot is refused, or undefined when it may be applied. */
export function checkFleetGuard(state: DesiredState, options: FleetGuardOptions): string | undefined {
  if (state.confirmDisableAll) return undefined;
  const mentioned = new Set<string>(state.tasks.map((task) => task.name));
  for (const entry of state.rejected) if (entry.name !== undefined) mentioned.add(entry.name);
  const dropped = [...options.enabledNow].filter(
    (name) => options.registered.has(name) && !mentioned.has(name),
  );
  if (dropped.length === 0) return undefined;
  const everyTask = dropped.length === options.enabledNow.size;
  if (!everyTask && dropped.length <= options.maxDisableShare * options.enabledNow.size) return undefined;

  const listed = dropped
    .sort()
    .slice(0, 10)
    .map((name) => `"${name}"`);
  const more = dropped.length > listed.length ? ` and ${dropped.length - listed.length} more` : "";
  const guesses = state.tasks
    .filter((task) => !options.registered.has(task.name))
    .map((task) => {
      const guess = closestName(task.name, options.registered);
      return guess ? ` "${shorten(task.name)}" is not a registered task: did you mean "${guess}"?` : "";
    })
    .filter(Boolean)
    .slice(0, 10)
    .join("");
  const share = everyTask
    ? `every enabled task (${dropped.length})`
    : `${dropped.length} of the ${options.enabledNow.size} enabled tasks (more than ${Math.round(options.maxDisableShare * 100)}%)`;
  return `config from ${state.source} (revision ${state.revision}) is refused: it leaves out ${share}, which would disable ${listed.join(", ")}${more}.${guesses} Fix the names, or set enabled: false on the tasks to turn off; if disabling them all is meant, add "confirmDisableAll": true to the document`;
}

/** A registered name the given one is probably a typo of: the same ignoring case, or one or two edits away. */
export function closestName(name: string, candidates: Iterable<string>): string | undefined {
  if (name.length > 200) return undefined;
  let best: { name: string; distance: number } | undefined;
  for (const candidate of candidates) {
    const distance =
      candidate.toLowerCase() === name.toLowerCase()
        ? 0
        : editDistance(name.toLowerCase(), candidate.toLowerCase(), 2);
    if (distance <= 2 && (!best || distance < best.distance)) best = { name: candidate, distance };
  }
  return best?.name;
}

/** Levenshtein distance, giving up (returning limit + 1) once it must exceed `limit`. */
function editDistance(a: string, b: string, limit: number): number {
  if (Math.abs(a.length - b.length) > limit) return limit + 1;
  let previous = Array.from({ length: b.length + 1 }, (_, index) => index);
  for (let i = 1; i <= a.length; i++) {
    const current = [i];
    let rowMin = i;
    for (let j = 1; j <= b.length; j++) {
      const value = Math.min(
        (previous[j] ?? 0) + 1,
        (current[j - 1] ?? 0) + 1,
        (previous[j - 1] ?? 0) + (a[i - 1] === b[j - 1] ? 0 : 1),
      );
      current.push(value);
      rowMin = Math.min(rowMin, value);
    }
    if (rowMin > limit) return limit + 1;
    previous = current;
  }
  return previous[b.length] ?? limit + 1;
}

function shorten(text: string): string {
  return text.length > 80 ? `${text.slice(0, 77)}...` : text;
}

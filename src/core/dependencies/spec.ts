/**
 * Task dependencies (docs/dependencies.md): the vocabulary shared by the config parser, the
 * planner, the engine and the operator views. Pure: no I/O.
 */

/** When a downstream runs once every upstream has settled for a slot. */
export type DependencyCondition = "allSucceeded" | "allDone" | "anyFailed";

export const DEPENDENCY_CONDITIONS: readonly DependencyCondition[] = ["allSucceeded", "allDone", "anyFailed"];

/** A downstream task's dependency, as the config gives it and its job row keeps it. */
export interface DependencySpec {
  /** Upstream task names, in the order the config lists them. */
  upstreams: string[];
  when: DependencyCondition;
  /** As written (`3h`), for the skip reason; null: wait as long as it takes. */
  waitAtMost: string | null;
  waitAtMostMs: number | null;
}

const UNIT_MS: Record<string, number> = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 };
const DURATION = /^(?:\d+(?:ms|s|m|h|d))+$/;
/** A wait longer than this is a mistake (a year of open waits per slot). */
export const MAX_WAIT_MS = 31 * 86_400_000;

/** `3h`, `90m`, `1h30m`, `45s`, `2d` -> milliseconds; a reason when it is not one. */
export function parseWaitAtMost(text: string): { ok: true; ms: number } | { ok: false; reason: string } {
  const trimmed = text.trim();
  if (!DURATION.test(trimmed))
    return {
      ok: false,
      reason: "must be a duration such as 30s, 90m, 3h, 1h30m or 2d (units ms, s, m, h, d)",
    };
  let ms = 0;
  for (const [, amount, unit] of trimmed.matchAll(/(\d+)(ms|s|m|h|d)/g))
    ms += Number(amount) * (UNIT_MS[unit ?? "ms"] ?? 1);
  if (ms <= 0) return { ok: false, reason: "must be longer than zero" };
  if (ms > MAX_WAIT_MS) return { ok: false, reason: "must be at most 31d" };
  return { ok: true, ms };
}

/** Two specs say the same thing (the planner's "did `after` change?"). */
export function sameSpec(
  a: DependencySpec | null | undefined,
  b: DependencySpec | null | undefined,
): boolean {
  if (!a || !b) return !a && !b;
  return (
    a.when === b.when &&
    a.waitAtMostMs === b.waitAtMostMs &&
    a.upstreams.length === b.upstreams.length &&
    a.upstreams.every((name, index) => b.upstreams[index] === name)
  );
}

/** `after [a, b] when allSucceeded, waitAtMost 3h`: how plans, audit rows and the CLI show a spec. */
export function describeSpec(spec: DependencySpec | null | undefined): string {
  if (!spec) return "(none)";
  return `after [${spec.upstreams.join(", ")}] when ${spec.when}${spec.waitAtMost ? `, waitAtMost ${spec.waitAtMost}` : ""}`;
}

/** Reads a spec stored in a job row (data.after); undefined when there is none or it is malformed. */
export function specOf(value: unknown): DependencySpec | undefined {
  if (typeof value !== "object" || value === null) return undefined;
  const raw = value as Record<string, unknown>;
  if (!Array.isArray(raw.upstreams) || !raw.upstreams.every((name) => typeof name === "string"))
    return undefined;
  if (!DEPENDENCY_CONDITIONS.includes(raw.when as DependencyCondition)) return undefined;
  return {
    upstreams: raw.upstreams as string[],
    when: raw.when as DependencyCondition,
    waitAtMost: typeof raw.waitAtMost === "string" ? raw.waitAtMost : null,
    waitAtMostMs: typeof raw.waitAtMostMs === "number" ? raw.waitAtMostMs : null,
  };
}

/** An upstream run a downstream run waited for: what its context and run record carry. */
export interface UpstreamRun {
  name: string;
  /** `name@slot`, the upstream handler's own `ctx.runKey`. */
  runKey: string;
  outcome: string;
  /** The W3C traceparent of the upstream run's span, when it was traced (docs/tracing.md). */
  traceparent?: string;
}

import { formatDuration } from "../core/policies/catchUp.js";

/** What a registration sets in code: the bounds a config entry may only lower. */
export interface LimitBounds {
  /** undefined: no timeout in code (a config entry may set one). */
  timeoutMs: number | undefined;
  /** The heap limit of an isolated task; undefined for an in-process one (no limit to lower). */
  memoryLimitMb: number | undefined;
}

/** What a config entry asks for (src/config/limitConfig.ts); undefined: the code's bound. */
export interface LimitRequest {
  timeoutMs?: number | undefined;
  memoryLimitMb?: number | undefined;
}

export interface Limits {
  timeoutMs: number | undefined;
  memoryLimitMb: number | undefined;
}

export interface LimitProblem {
  field: "timeout" | "memoryLimit";
  value: string;
  reason: string;
}

/**
 * The limits in force for a task: the config's where it lowers the code's bound, else the code's.
 * A request above the bound (or a memory limit for an in-process task) is a problem, and the
 * caller keeps the task's previous limits (docs/isolation.md, "Limits from the config").
 */
export function decideLimits(
  bounds: LimitBounds,
  request: LimitRequest,
): { ok: true; limits: Limits } | { ok: false; problems: LimitProblem[] } {
  const problems: LimitProblem[] = [];
  const { timeoutMs, memoryLimitMb } = request;
  if (timeoutMs !== undefined && bounds.timeoutMs !== undefined && timeoutMs > bounds.timeoutMs)
    problems.push({
      field: "timeout",
      value: formatDuration(timeoutMs),
      reason: `is above the task's timeoutMs set in code (${formatDuration(bounds.timeoutMs)}); the config may only lower it: raise timeoutMs in the registration to allow more`,
    });
  if (memoryLimitMb !== undefined && bounds.memoryLimitMb === undefined)
    problems.push({
      field: "memoryLimit",
      value: `${memoryLimitMb}MB`,
      reason:
        'applies to a task with isolation "worker" or "process" only (an in-process handler shares the scheduler\'s heap); remove it',
    });
  else if (
    memoryLimitMb !== undefined &&
    bounds.memoryLimitMb !== undefined &&
    memoryLimitMb > bounds.memoryLimitMb
  )
    problems.push({
      field: "memoryLimit",
      value: `${memoryLimitMb}MB`,
      reason: `is above the task's memoryLimitMb set in code (${bounds.memoryLimitMb} MB); the config may only lower it: raise memoryLimitMb in the registration to allow more`,
    });
  if (problems.length > 0) return { ok: false, problems };
  return {
    ok: true,
    limits: {
      timeoutMs: timeoutMs ?? bounds.timeoutMs,
      memoryLimitMb: memoryLimitMb ?? bounds.memoryLimitMb,
    },
  };
}

/**
 * The limits in force per task, as the last applied snapshot set them (the scheduler applies each
 * one). A task the snapshot does not name has its code's bounds; one whose limits were refused
 * keeps those it had.
 */
export class TaskLimits {
  readonly #bounds: ReadonlyMap<string, LimitBounds>;
  readonly #current = new Map<string, Limits>();

  constructor(bounds: ReadonlyMap<string, LimitBounds>) {
    this.#bounds = bounds;
  }

  /** Applies a snapshot's requests; returns the refused ones by task (the task keeps its limits). */
  apply(
    requests: ReadonlyMap<string, LimitRequest>,
    refused: ReadonlySet<string>,
  ): Map<string, LimitProblem[]> {
    const problems = new Map<string, LimitProblem[]>();
    for (const [name, bounds] of this.#bounds) {
      // an entry refused for another reason keeps its task's last valid state, limits included
      if (refused.has(name)) continue;
      const decided = decideLimits(bounds, requests.get(name) ?? {});
      if (decided.ok) this.#current.set(name, decided.limits);
      else problems.set(name, decided.problems);
    }
    return problems;
  }

  /** The limits in force (the code's bounds before any snapshot). */
  of(name: string): Limits {
    const current = this.#current.get(name);
    if (current) return current;
    const bounds = this.#bounds.get(name);
    return { timeoutMs: bounds?.timeoutMs, memoryLimitMb: bounds?.memoryLimitMb };
  }
}

/** The bounds of registered tasks: their timeoutMs, and an isolated task's heap limit. */
export function boundsOf(
  tasks: readonly {
    name: string;
    timeoutMs: number | undefined;
    module: { mode: string; memoryLimitMb: number } | undefined;
  }[],
): Map<string, LimitBounds> {
  return new Map(
    tasks.map((task) => [
      task.name,
      {
        timeoutMs: task.timeoutMs,
        memoryLimitMb: task.module && task.module.mode !== "none" ? task.module.memoryLimitMb : undefined,
      },
    ]),
  );
}

/** A limit problem as one line: `config entry "x": timeout 90s is above ...; it keeps ...`. */
export function describeLimitProblems(
  taskName: string,
  problems: readonly LimitProblem[],
  kept: Limits,
): string {
  const what = problems.map((problem) => `${problem.field} ${problem.value} ${problem.reason}`).join("; ");
  const timeout = kept.timeoutMs === undefined ? "none" : formatDuration(kept.timeoutMs);
  const memory = kept.memoryLimitMb === undefined ? "" : `, memoryLimit ${kept.memoryLimitMb}MB`;
  return `config entry "${taskName}": ${what}; the task keeps its limits (timeout ${timeout}${memory})`;
}

import { z } from "zod";
import { checkDependencyGraph, type GraphNode } from "../core/dependencies/graph.js";
import {
  DEPENDENCY_CONDITIONS,
  type DependencyCondition,
  type DependencySpec,
  parseWaitAtMost,
} from "../core/dependencies/spec.js";
import type { DesiredTask, EntryProblem, RejectedEntry } from "./desiredState.js";

/** The entry fields of a task that runs after others (docs/dependencies.md). */
export const DEPENDENCY_FIELDS = {
  after: z
    .array(z.string({ error: "must be a list of task names" }), { error: "must be a list of task names" })
    .optional(),
  when: z
    .enum(DEPENDENCY_CONDITIONS as [DependencyCondition, ...DependencyCondition[]], {
      error: `must be one of ${DEPENDENCY_CONDITIONS.join(", ")}`,
    })
    .optional(),
  waitAtMost: z.string({ error: "must be a duration such as 3h" }).optional(),
};

export type EntryDependency = DependencySpec;

interface DependencyFields {
  cron?: string | undefined;
  /** The other schedule kinds (src/config/policyConfig.ts): with one of them a task needs no cron. */
  every?: unknown;
  at?: unknown;
  timezone?: string | undefined;
  after?: string[] | undefined;
  when?: DependencyCondition | undefined;
  waitAtMost?: string | undefined;
}

/**
 * An entry's own dependency fields: a spec, none (a cron task), or the entry's problems (the first
 * one is the rejection's; a missing schedule and a stray `when` are both named).
 */
export function readDependency(
  entry: DependencyFields,
):
  | { ok: true; spec: DependencySpec | undefined }
  | { ok: false; problem: EntryProblem; problems: EntryProblem[] } {
  const failed = (...problems: EntryProblem[]) =>
    ({ ok: false, problem: problems[0] as EntryProblem, problems }) as const;
  if (entry.after === undefined) {
    const problems: EntryProblem[] = [];
    if (entry.cron === undefined && entry.every === undefined && entry.at === undefined)
      problems.push({
        field: "cron",
        value: undefined,
        reason:
          'a schedule is required: cron (e.g. "*/5 * * * *"), every (e.g. "15m") or at (e.g. "2026-12-01T03:00:00Z"), or "after: [upstream, ...]" to run it after other tasks',
      });
    for (const stray of ["when", "waitAtMost"] as const)
      if (entry[stray] !== undefined)
        problems.push({
          field: stray,
          value: entry[stray],
          reason: `applies only to a task with "after: [...]"; add "after" or remove "${stray}"`,
        });
    return problems.length > 0 ? failed(...problems) : { ok: true, spec: undefined };
  }
  if (entry.timezone !== undefined && entry.cron === undefined)
    return failed({
      field: "timezone",
      value: entry.timezone,
      reason: 'a task with "after" runs for its upstreams\' slots, in their timezone; remove "timezone"',
    });
  let waitAtMostMs: number | null = null;
  if (entry.waitAtMost !== undefined) {
    const parsed = parseWaitAtMost(entry.waitAtMost);
    if (!parsed.ok) return failed({ field: "waitAtMost", value: entry.waitAtMost, reason: parsed.reason });
    waitAtMostMs = parsed.ms;
  }
  return {
    ok: true,
    spec: {
      upstreams: entry.after,
      when: entry.when ?? "allSucceeded",
      waitAtMost: entry.waitAtMost?.trim() ?? null,
      waitAtMostMs,
    },
  };
}

/**
 * Checks the graph of the entries accepted so far: tasks with a graph problem (a cycle, an unknown
 * or rejected upstream, `after` with `cron`, an empty `after`, upstreams on different schedules)
 * join `rejected`, the others are returned, downstreams with their upstreams' schedule.
 */
export function applyDependencies(
  tasks: DesiredTask[],
  indexesByName: ReadonlyMap<string, number[]>,
  dependencies: ReadonlyMap<number, DependencySpec>,
  rejected: RejectedEntry[],
): DesiredTask[] {
  if (dependencies.size === 0) return tasks;
  const specOf = new Map<string, DependencySpec>();
  for (const task of tasks) {
    const index = indexesByName.get(task.name)?.[0];
    const spec = index === undefined ? undefined : dependencies.get(index);
    if (spec) specOf.set(task.name, spec);
  }
  const nodes: GraphNode[] = tasks.map((task) => {
    const spec = specOf.get(task.name);
    return {
      name: task.name,
      after: spec?.upstreams,
      cron: task.cron === "" ? undefined : task.cron,
      timezone: task.timezone,
    };
  });
  const refused = new Map<string, number>();
  for (const entry of rejected) if (entry.name !== undefined) refused.set(entry.name, entry.index);
  const check = checkDependencyGraph(nodes, {
    describeMissing: (name) =>
      refused.has(name) ? `is rejected in this document (tasks[${refused.get(name)}])` : undefined,
  });
  const accepted: DesiredTask[] = [];
  for (const task of tasks) {
    const problem = check.problems.get(task.name);
    const spec = specOf.get(task.name);
    if (problem) {
      rejected.push({
        index: indexesByName.get(task.name)?.[0] ?? -1,
        name: task.name,
        field: "after",
        value: spec?.upstreams,
        reason: problem,
      });
      continue;
    }
    if (!spec) {
      accepted.push(task);
      continue;
    }
    const schedule = check.schedules.get(task.name);
    accepted.push({
      ...task,
      cron: schedule?.cron ?? task.cron,
      timezone: schedule?.timezone ?? task.timezone,
      after: spec,
    });
  }
  return accepted;
}

import type { DesiredState } from "../config/desiredState.js";
import { describeSpec } from "../core/dependencies/spec.js";

/**
 * The dependency graph of a desired state as `validate` and `plan` print it (docs/dependencies.md):
 * one line per downstream with its upstreams and the slots it runs for, and the tasks nothing
 * waits on left out. Rejected entries are printed by the callers, with their chain.
 */
export function graphLines(
  desired: DesiredState,
  rejectedByPlanner: ReadonlySet<string> = new Set(),
): string[] {
  const downstreams = desired.tasks.filter((task) => task.after && !rejectedByPlanner.has(task.name));
  if (downstreams.length === 0) return [];
  const lines = ["dependency graph:"];
  for (const task of downstreams)
    lines.push(
      `  ${task.name}: ${describeSpec(task.after)}; runs for the slots of "${task.cron}" (${task.timezone})`,
    );
  return lines;
}

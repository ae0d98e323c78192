import type { DesiredState } from "../config/desiredState.js";
import { type DependencySpec, describeSpec } from "../core/dependencies/spec.js";

/** One downstream of the graph: what `validate --json` and `plan --json` print, and a text line's data. */
export interface GraphEntry {
  task: string;
  after: DependencySpec;
  /** The slots it runs for: its upstreams' schedule. */
  cron: string;
  timezone: string;
  /** The text output's line for it. */
  line: string;
}

/**
 * The dependency graph of a desired state as `validate` and `plan` show it (docs/dependencies.md):
 * each downstream with its upstreams and the slots it runs for; the tasks nothing waits on are left
 * out. Rejected entries are shown by the callers, with their chain.
 */
export function graphEntries(
  desired: DesiredState,
  rejectedByPlanner: ReadonlySet<string> = new Set(),
): GraphEntry[] {
  return desired.tasks.flatMap((task) =>
    task.after && !rejectedByPlanner.has(task.name)
      ? [
          {
            task: task.name,
            after: task.after,
            cron: task.cron,
            timezone: task.timezone,
            line: `  ${task.name}: ${describeSpec(task.after)}; runs for the slots of "${task.cron}" (${task.timezone})`,
          },
        ]
      : [],
  );
}

/** The graph as text: a heading and one line per downstream; nothing when no task runs after another. */
export function graphLines(entries: readonly GraphEntry[]): string[] {
  return entries.length === 0 ? [] : ["dependency graph:", ...entries.map((entry) => entry.line)];
}

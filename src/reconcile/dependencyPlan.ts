import type { DesiredTask } from "../config/desiredState.js";
import { checkDependencyGraph } from "../core/dependencies/graph.js";

/**
 * The part of dependency validation only the planner can do: it knows which tasks this code
 * registered. A downstream whose upstream (or an upstream's upstream) is not registered is
 * rejected with the reason; the parser (src/config/dependencyEntries.ts) checked the rest.
 */
export function unregisteredUpstreams(
  tasks: readonly DesiredTask[],
  registered: ReadonlySet<string>,
): Map<string, string> {
  if (!tasks.some((task) => task.after)) return new Map();
  const inConfig = new Set(tasks.map((task) => task.name));
  const check = checkDependencyGraph(
    tasks
      .filter((task) => registered.has(task.name))
      .map((task) => ({
        name: task.name,
        after: task.after?.upstreams,
        cron: task.after ? undefined : task.cron,
        timezone: task.timezone,
      })),
    {
      describeMissing: (name) =>
        inConfig.has(name)
          ? "is not registered in code (its entry is rejected)"
          : "is not registered in code",
    },
  );
  return check.problems;
}

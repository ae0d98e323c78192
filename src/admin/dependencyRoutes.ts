import type { FastifyInstance } from "fastify";
import { HttpError } from "./httpErrors.js";
import type { AdminScheduler } from "./schedulerApi.js";
import { chainsQuery, parseOr400 } from "./schemas.js";

/**
 * GET /chains[?task=name&limit=50]: per slot, the state of each downstream's wait for its
 * upstreams (docs/dependencies.md), newest slot first. With `task`, the chain it belongs to: every
 * task linked to it by `after`, up and down.
 */
export function dependencyRoutes(app: FastifyInstance, scheduler: AdminScheduler): void {
  app.get("/chains", async (request) => {
    const query = parseOr400(chainsQuery, request.query, "query");
    const statuses = await scheduler.status();
    let tasks: string[] | undefined;
    if (query.task !== undefined) {
      if (!statuses.some((task) => task.name === query.task))
        throw new HttpError(404, `no task named "${query.task}" (neither registered nor in the database)`);
      tasks = chainOf(query.task, statuses);
    }
    const graph = statuses
      .filter((task) => tasks === undefined || tasks.includes(task.name))
      .filter((task) => task.dependencies.upstreams.length > 0 || task.dependencies.downstreams.length > 0)
      .map((task) => ({ name: task.name, ...task.dependencies }));
    const slots = await scheduler.chains({ ...(tasks ? { tasks } : {}), limit: query.limit });
    return { tasks: graph, slots };
  });
}

/** Every task linked to `start` by `after`, in either direction. */
function chainOf(
  start: string,
  statuses: ReadonlyArray<{ name: string; dependencies: { upstreams: string[]; downstreams: string[] } }>,
): string[] {
  const byName = new Map(statuses.map((task) => [task.name, task.dependencies]));
  const seen = new Set([start]);
  const queue = [start];
  while (queue.length > 0) {
    const name = queue.pop() as string;
    const links = byName.get(name);
    for (const next of [...(links?.upstreams ?? []), ...(links?.downstreams ?? [])])
      if (!seen.has(next)) {
        seen.add(next);
        queue.push(next);
      }
  }
  return [...seen].sort();
}

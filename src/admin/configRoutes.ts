import type { FastifyInstance } from "fastify";
import type { AdminScheduler } from "./schedulerApi.js";

/** GET /config: the desired state in force and what the last reconcile did. */
export function configRoutes(app: FastifyInstance, scheduler: AdminScheduler): void {
  app.get("/config", async () => {
    const desired = scheduler.desiredState();
    const last = scheduler.lastReconcile();
    return {
      desired: desired
        ? {
            source: desired.source,
            revision: desired.revision,
            tasks: desired.tasks,
            rejected: desired.rejected,
          }
        : null,
      lastReconcile: last
        ? {
            at: last.at,
            trigger: last.trigger,
            revision: last.revision,
            changes: last.applied,
            reported: last.plan.actions.filter(
              (action) => action.kind === "reject" || action.kind === "orphan",
            ),
            unchanged: last.plan.unchanged,
          }
        : null,
    };
  });
}

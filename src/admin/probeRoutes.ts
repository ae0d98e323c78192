import type { FastifyInstance } from "fastify";
import { toError } from "../scheduler/logger.js";
import { HttpError } from "./httpErrors.js";
import type { AdminScheduler } from "./schedulerApi.js";

/** What /metrics serves: `createMetrics()`'s result fits. */
export interface MetricsSource {
  readonly contentType: string;
  render(): Promise<string>;
}

/** GET /healthz (the process answers), GET /readyz (the scheduler is ready), GET /metrics. */
export function probeRoutes(
  app: FastifyInstance,
  scheduler: AdminScheduler,
  metrics: MetricsSource | undefined,
): void {
  app.get("/healthz", async () => ({ status: "ok" }));

  app.get("/readyz", async (_request, reply) => {
    try {
      const readiness = await scheduler.readiness();
      return reply.code(readiness.ready ? 200 : 503).send(readiness);
    } catch (error) {
      return reply
        .code(503)
        .send({ ready: false, error: `readiness check failed: ${toError(error).message}` });
    }
  });

  app.get("/metrics", async (_request, reply) => {
    if (!metrics) throw new HttpError(404, "metrics are not enabled on this admin server");
    const text = await metrics.render();
    return reply.type(metrics.contentType).send(text);
  });
}

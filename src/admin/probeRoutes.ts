import type { FastifyInstance } from "fastify";
import type { EventLoopMonitor } from "../core/eventLoopMonitor.js";
import { toError } from "../core/logger.js";
import { HttpError } from "./httpErrors.js";
import type { AdminScheduler } from "./schedulerApi.js";

/** What /metrics serves: `createMetrics()`'s result fits. */
export interface MetricsSource {
  readonly contentType: string;
  render(): Promise<string>;
}

/** Paths answered without the token even beyond loopback: probes carry no credentials. */
export const PROBE_PATHS = ["/healthz", "/readyz"] as const;

/**
 * GET /healthz (the process answers and its event loop has not stalled past `stallMs`),
 * GET /readyz (the scheduler is ready), GET /metrics.
 */
export function probeRoutes(
  app: FastifyInstance,
  scheduler: AdminScheduler,
  metrics: MetricsSource | undefined,
  liveness?: { monitor: EventLoopMonitor; stallMs: number },
): void {
  app.get("/healthz", async (_request, reply) => {
    if (!liveness) return { status: "ok" };
    const eventLoopDelayMs = Math.round(liveness.monitor.maxDelayMs());
    if (eventLoopDelayMs > liveness.stallMs) {
      return reply.code(503).send({
        status: "stalled",
        eventLoopDelayMs,
        error: `the event loop was blocked for ${eventLoopDelayMs} ms in the last 10 s (limit ${liveness.stallMs} ms)`,
      });
    }
    return { status: "ok", eventLoopDelayMs };
  });

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

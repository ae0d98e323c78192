import type { AddressInfo } from "node:net";
import type { FastifyInstance } from "fastify";
import { EventLoopMonitor } from "../core/eventLoopMonitor.js";
import type { Logger } from "../core/logger.js";
import { redactSecrets, registerSecret } from "../observability/redact.js";
import { AccessPolicy, type Caller } from "./auth.js";
import { errorHandler, notFoundHandler } from "./httpErrors.js";
import { MissedSlotTracker } from "./missedSlots.js";
import type { MetricsSource } from "./probeRoutes.js";
import type { AdminScheduler } from "./schedulerApi.js";
import type { AdminToken } from "./tokens.js";

export const DEFAULT_ADMIN_PORT = 8787;

export interface AdminServerOptions {
  scheduler: AdminScheduler;
  /** Served at /metrics (`createMetrics(scheduler)`); without it /metrics answers 404. */
  metrics?: MetricsSource;
  /** Default 127.0.0.1. Beyond loopback every endpoint needs the token, and a token is required. */
  host?: string;
  /** Default 8787; 0 picks a free port (see listen()'s url). */
  port?: number;
  /**
   * The single bearer token (CRONWARDEN_ADMIN_TOKEN), at least 16 characters: an operator token
   * named "admin". Kept for compatibility; `tokens` names each caller.
   */
  token?: string | undefined;
  /**
   * Named tokens with roles (the service reads them from CRONWARDEN_TOKENS and
   * CRONWARDEN_TOKENS_FILE): `viewer` reads, `operator` also runs tasks now. Several per role, for rotation.
   * Without any operator token, mutating calls are refused.
   */
  tokens?: readonly AdminToken[] | undefined;
  /**
   * /healthz answers 503 when the event loop was blocked longer than this in the last 10 s
   * (CRONWARDEN_EVENT_LOOP_STALL_MS); default 10 s; 0 turns the check off.
   */
  eventLoopStallMs?: number;
  logger: Logger;
}

export interface AdminServer {
  listen(): Promise<{ url: string }>;
  close(): Promise<void>;
}

/**
 * The admin HTTP API: task status, run history, run now, the config in force, health, readiness
 * and Prometheus metrics. Throws CronwardenError INVALID_SETTINGS when asked to listen beyond
 * loopback without a token, or given an invalid token (short secret, bad name or role, a name or
 * secret given twice).
 */
export function createAdminServer(options: AdminServerOptions): AdminServer {
  const host = options.host ?? "127.0.0.1";
  const port = options.port ?? DEFAULT_ADMIN_PORT;
  const token = options.token === "" ? undefined : options.token;
  const access = new AccessPolicy(host, token, options.tokens ?? []);
  const logger = options.logger.child({ component: "admin-api" });
  const secrets = [...(token === undefined ? [] : [token]), ...(options.tokens ?? []).map((t) => t.secret)];
  for (const secret of secrets) registerSecret(secret);
  const callers = new WeakMap<object, Caller>();
  const callerOf = (request: { raw: object }): Caller => callers.get(request.raw) ?? { kind: "loopback" };

  const missed = new MissedSlotTracker(options.scheduler, logger);
  let app: FastifyInstance | undefined;
  const stallMs = options.eventLoopStallMs ?? 10_000;
  let monitor: EventLoopMonitor | undefined;

  // fastify and the routes are loaded when the server starts, not by every process that imports
  // cronwarden: a scheduler without an admin API does not carry them
  const build = async (): Promise<FastifyInstance> => {
    const routes = await loadRoutes();
    const { Fastify, DASHBOARD_PREFIX, PROBE_PATHS } = routes;
    // fastify's own request logging is off: nothing logs request headers (the token)
    const server = Fastify({ logger: false, bodyLimit: 16 * 1024, return503OnClosing: true });
    server.addHook("onRequest", async (request) => {
      // the dashboard's static files hold no data; every data call they make carries the token
      if (request.method === "GET" && isDashboardFile(request.url, DASHBOARD_PREFIX)) return;
      // probes (kubelet) send no credentials; they reveal only up/ready booleans
      if (request.method === "GET" && isProbe(request.url, PROBE_PATHS)) return;
      callers.set(request.raw, access.check(request));
    });
    server.addHook("onSend", async (_request, reply, payload) => {
      reply.header("cache-control", "no-store");
      return typeof payload === "string" ? redactSecrets(payload, secrets) : payload;
    });
    server.setErrorHandler(errorHandler(logger));
    server.setNotFoundHandler(notFoundHandler);
    routes.taskRoutes(server, options.scheduler, missed, callerOf);
    routes.timelineRoutes(server, options.scheduler);
    routes.dependencyRoutes(server, options.scheduler);
    routes.configRoutes(server, options.scheduler);
    routes.opsRoutes(server, options.scheduler, callerOf);
    monitor = stallMs > 0 ? new EventLoopMonitor() : undefined;
    routes.probeRoutes(server, options.scheduler, options.metrics, monitor && { monitor, stallMs });
    routes.dashboardRoutes(server, options.scheduler);
    return server;
  };

  return {
    async listen() {
      app ??= await build();
      await app.listen({ host, port });
      const address = app.server.address();
      const bound = typeof address === "object" && address ? address : undefined;
      const url = bound ? urlOf(bound) : `http://${host}:${port}`;
      const tokens = access.describe();
      logger.info({ url, authenticated: tokens.length > 0, tokens }, `admin API listening on ${url}`);
      return { url };
    },
    async close() {
      missed.close();
      monitor?.close();
      await app?.close();
    },
  };
}

/** fastify and the route modules, loaded once the server starts. */
async function loadRoutes() {
  const [{ default: Fastify }, dashboard, config, dependency, ops, probe, task, timeline] = await Promise.all(
    [
      import("fastify"),
      import("../dashboard/dashboardRoutes.js"),
      import("./configRoutes.js"),
      import("./dependencyRoutes.js"),
      import("./opsRoutes.js"),
      import("./probeRoutes.js"),
      import("./taskRoutes.js"),
      import("./timelineRoutes.js"),
    ],
  );
  return { Fastify, ...dashboard, ...config, ...dependency, ...ops, ...probe, ...task, ...timeline };
}

function isDashboardFile(url: string, prefix: string): boolean {
  const pathname = url.split("?")[0] ?? "";
  return pathname === "/" || pathname === "/dashboard" || pathname.startsWith(prefix);
}

function isProbe(url: string, probePaths: readonly string[]): boolean {
  const pathname = url.split("?")[0] ?? "";
  return probePaths.includes(pathname);
}

function urlOf(address: AddressInfo): string {
  const host = address.family === "IPv6" ? `[${address.address}]` : address.address;
  return `http://${host}:${address.port}`;
}

import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath } from "node:url";
import type { FastifyInstance } from "fastify";
import { z } from "zod";
import type { AuditRecord } from "../store/auditLog.js";

/** What the dashboard needs beyond the admin API's own routes. */
export interface DashboardScheduler {
  auditTrail(query: { task?: string; limit?: number }): Promise<AuditRecord[]>;
}

/** Static files of the dashboard: public (they hold no data; every data call carries the token). */
export const DASHBOARD_PREFIX = "/dashboard/";

const assetsDir = path.join(path.dirname(fileURLToPath(import.meta.url)), "assets");
const auditQuery = z.object({
  task: z.string().min(1).max(200).optional(),
  limit: z.coerce.number().int().min(1).max(500).default(50),
});

/**
 * The web dashboard, served by the admin server: five static files and cronstrue's browser
 * build (cron in words), read once at start-up. No build step, no CDN. Plus `GET /audit`, the
 * audit trail the config page shows drift repairs from.
 */
export function dashboardRoutes(app: FastifyInstance, scheduler: DashboardScheduler): void {
  const require = createRequire(import.meta.url);
  const files: Record<string, { body: string; type: string }> = {
    "": { body: readFileSync(path.join(assetsDir, "index.html"), "utf8"), type: "text/html; charset=utf-8" },
    "app.js": {
      body: readFileSync(path.join(assetsDir, "app.js"), "utf8"),
      type: "text/javascript; charset=utf-8",
    },
    "ops.js": {
      body: readFileSync(path.join(assetsDir, "ops.js"), "utf8"),
      type: "text/javascript; charset=utf-8",
    },
    "shards.js": {
      body: readFileSync(path.join(assetsDir, "shards.js"), "utf8"),
      type: "text/javascript; charset=utf-8",
    },
    "style.css": {
      body: readFileSync(path.join(assetsDir, "style.css"), "utf8"),
      type: "text/css; charset=utf-8",
    },
    "cronstrue.js": {
      body: readFileSync(require.resolve("cronstrue/dist/cronstrue.min.js"), "utf8"),
      type: "text/javascript; charset=utf-8",
    },
  };

  app.get("/", async (_request, reply) => reply.redirect(DASHBOARD_PREFIX));
  app.get("/dashboard", async (_request, reply) => reply.redirect(DASHBOARD_PREFIX));
  app.get<{ Params: { file: string } }>(`${DASHBOARD_PREFIX}:file`, async (request, reply) => {
    const file = files[request.params.file];
    if (!file) return reply.code(404).send({ error: `no dashboard file "${request.params.file}"` });
    return reply
      .type(file.type)
      .header(
        "content-security-policy",
        "default-src 'self'; style-src 'self'; script-src 'self'; img-src 'self' data:",
      )
      .send(file.body);
  });
  app.get(DASHBOARD_PREFIX, async (_request, reply) => {
    const index = files[""] as { body: string; type: string };
    return reply.type(index.type).send(index.body);
  });
  app.get("/audit", async (request, reply) => {
    const query = auditQuery.safeParse(request.query);
    if (!query.success) {
      return reply.code(400).send({
        error: `invalid query: ${query.error.issues.map((issue) => `${issue.path.join(".")}: ${issue.message}`).join("; ")}`,
      });
    }
    return scheduler.auditTrail(query.data);
  });
}

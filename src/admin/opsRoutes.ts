import type { FastifyInstance } from "fastify";
import { z } from "zod";
import { type Caller, callerName } from "./auth.js";
import { HttpError } from "./httpErrors.js";
import type { AdminScheduler } from "./schedulerApi.js";
import { isoDate, parseOr400, runsQuery, taskParams } from "./schemas.js";
import { decodeCursor, encodeCursor } from "./timelineRoutes.js";

/** A reason is kept with the switch and in the audit trail: short text, said once. */
const MAX_REASON = 500;
const reason = z
  .string()
  .trim()
  .min(1, "reason must say why (1-500 characters)")
  .max(MAX_REASON, `reason must be at most ${MAX_REASON} characters`);

const pauseBody = z.object({ reason }).strict();
const resumeBody = z.union([z.undefined(), z.null(), z.object({ reason: reason.optional() }).strict()]);

/** Words to search for: websearch syntax ("a phrase", -excluded, or), one line. */
const MAX_WORDS = 200;
const searchQuery = z
  .object({
    task: taskParams.shape.name.optional(),
    outcome: runsQuery.shape.outcome,
    from: isoDate("from").optional(),
    to: isoDate("to").optional(),
    q: z
      .string()
      .trim()
      .min(1, "q must hold a word to search for")
      .max(MAX_WORDS, `q must be at most ${MAX_WORDS} characters`)
      .optional(),
    cursor: z.string().max(500).optional(),
    limit: runsQuery.shape.limit,
  })
  .strict();
const deathsQuery = z.object({ from: isoDate("from"), to: isoDate("to") }).strict();
const searchCursor = z.object({ timestamp: z.string(), id: z.string().uuid() });

/**
 * GET /pause-all, POST /pause-all {reason}, POST /resume-all [{reason}] (docs/operations.md,
 * "Pause all"); GET /instances; GET /runs/search. Acting needs an operator token (src/admin/auth.ts);
 * every switch is audited with the token's name and the reason.
 */
export function opsRoutes(
  app: FastifyInstance,
  scheduler: AdminScheduler,
  callerOf: (request: { raw: object }) => Caller,
): void {
  app.get("/pause-all", async () => {
    const pause = scheduler.fleet.pauseState();
    return { paused: pause !== undefined, pause: pause ?? null };
  });

  app.post("/pause-all", async (request) => {
    const body = parseOr400(pauseBody, request.body ?? {}, "body");
    const result = await scheduler.fleet.pauseAll({
      requestedBy: callerName(callerOf(request)),
      via: "admin API",
      reason: body.reason,
    });
    return { paused: true, changed: result.changed, pause: result.pause };
  });

  app.post("/resume-all", async (request) => {
    const body = parseOr400(resumeBody, request.body, "body");
    const result = await scheduler.fleet.resumeAll({
      requestedBy: callerName(callerOf(request)),
      via: "admin API",
      reason: body?.reason ?? "lifted",
    });
    return { paused: false, changed: result.changed, lifted: result.lifted };
  });

  app.get("/instances", async () => scheduler.fleet.instances());

  // the timeline's marks of instances that died in the range (src/status/timelineMarks.ts)
  app.get("/instances/deaths", async (request) => {
    const query = parseOr400(deathsQuery, request.query, "query");
    if (query.from.getTime() >= query.to.getTime())
      throw new HttpError(400, "invalid query: from must be before to");
    return { marks: await scheduler.fleet.instanceDeaths(query) };
  });

  app.get("/runs/search", async (request, reply) => {
    const query = parseOr400(searchQuery, request.query, "query");
    if (query.from && query.to && query.from.getTime() >= query.to.getTime())
      throw new HttpError(400, "invalid query: from must be before to");
    const before = query.cursor === undefined ? undefined : decodeCursor(query.cursor, searchCursor);
    const page = await scheduler.fleet.searchRuns({
      ...(query.task === undefined ? {} : { task: query.task }),
      ...(query.outcome === undefined ? {} : { outcomes: query.outcome }),
      ...(query.from === undefined ? {} : { from: query.from }),
      ...(query.to === undefined ? {} : { to: query.to }),
      ...(query.q === undefined ? {} : { text: query.q }),
      ...(before ? { before: { timestamp: new Date(before.timestamp), id: before.id } } : {}),
      limit: query.limit,
    });
    const nextCursor = page.next
      ? encodeCursor({ timestamp: page.next.timestamp.toISOString(), id: page.next.id })
      : null;
    if (nextCursor) reply.header("x-next-cursor", nextCursor);
    return { runs: page.runs, nextCursor };
  });
}

import type { FastifyInstance } from "fastify";
import { z } from "zod";
import { nextRunTimes } from "../config/cronValidator.js";
import type { DesiredState } from "../config/desiredState.js";
import type { TaskStatus } from "../status/statusModel.js";
import { calendarsNamed } from "../status/taskCalendars.js";
import { type Caller, callerName } from "./auth.js";
import { HttpError } from "./httpErrors.js";
import type { MissedSlotTracker } from "./missedSlots.js";
import type { AdminScheduler } from "./schedulerApi.js";
import { parseOr400, runNowBody, runNowQuery, runsQuery, taskParams } from "./schemas.js";
import { slotRoutes } from "./slotRoutes.js";
import { decodeCursor, encodeCursor } from "./timelineRoutes.js";

const NEXT_RUNS = 5;
const historyCursor = z.object({ slot: z.string(), timestamp: z.string(), id: z.string().uuid() });

/** GET /tasks, GET /tasks/:name, GET /tasks/:name/runs, POST /tasks/:name/run[?withDownstream=true], POST /tasks/:name/resume. */
export function taskRoutes(
  app: FastifyInstance,
  scheduler: AdminScheduler,
  missed: MissedSlotTracker,
  callerOf: (request: { raw: object }) => Caller,
): void {
  const withMissed = (task: TaskStatus) => ({ ...task, missedSlot: missed.get(task.name) });

  app.get("/tasks", async () => (await scheduler.status()).map(withMissed));

  app.get("/tasks/:name", async (request) => {
    const { name } = parseOr400(taskParams, request.params, "path");
    const task = await scheduler.taskStatus(name);
    if (!task) throw new HttpError(404, `no task named "${name}" (neither registered nor in the database)`);
    return { ...withMissed(task), nextRuns: nextRuns(task, scheduler.desiredState()) };
  });

  app.get("/tasks/:name/runs", async (request, reply) => {
    const { name } = parseOr400(taskParams, request.params, "path");
    const query = parseOr400(runsQuery, request.query, "query");
    if (!(await scheduler.taskStatus(name))) {
      throw new HttpError(404, `no task named "${name}" (neither registered nor in the database)`);
    }
    const before = query.cursor === undefined ? undefined : decodeCursor(query.cursor, historyCursor);
    const page = await scheduler.runHistory({
      task: name,
      limit: query.limit,
      before: before ? { ...before, timestamp: new Date(before.timestamp) } : undefined,
      outcomes: query.outcome,
      trigger: query.trigger,
      from: query.from,
      to: query.to,
    });
    // the body stays a plain array (older clients); the next page's cursor is a header
    if (page.nextCursor) reply.header("x-next-cursor", encodeCursor(page.nextCursor));
    return page.runs;
  });

  taskActionRoutes(app, scheduler, callerOf);
  slotRoutes(app, scheduler, callerOf); // re-run a slot, backfill a range
}

/** An operator's actions on one task: run now, resume; each recorded with the caller's name. */
function taskActionRoutes(
  app: FastifyInstance,
  scheduler: AdminScheduler,
  callerOf: (request: { raw: object }) => Caller,
): void {
  app.post("/tasks/:name/run", async (request, reply) => {
    const { name } = parseOr400(taskParams, request.params, "path");
    parseOr400(runNowBody, request.body, "body");
    const { withDownstream = false } = parseOr400(runNowQuery, request.query, "query");
    const result = await scheduler.runNow(name, {
      requestedBy: callerName(callerOf(request)),
      via: "admin API",
      withDownstream,
    });
    switch (result.status) {
      case "queued":
        return reply.code(202).send({
          status: "queued",
          task: result.taskName,
          requestedAt: result.requestedAt,
          requestedBy: result.requestedBy,
          // said explicitly: a manual run of an upstream starts its downstreams only when asked
          withDownstream,
        });
      case "unknown":
        throw new HttpError(404, `cannot run "${name}": ${result.reason}`);
      case "running":
      case "disabled":
        return reply
          .code(409)
          .send({ error: `cannot run "${name}" now: ${result.reason}`, status: result.status });
    }
  });

  // a task paused by failure runs again (docs/behaviour.md, "Pause on failure"); audited
  app.post("/tasks/:name/resume", async (request, reply) => {
    const { name } = parseOr400(taskParams, request.params, "path");
    parseOr400(runNowBody, request.body, "body");
    const result = await scheduler.resume(name, {
      requestedBy: callerName(callerOf(request)),
      via: "admin API",
    });
    switch (result.status) {
      case "resumed":
        return reply.code(200).send({
          status: "resumed",
          task: result.taskName,
          resumedBy: result.resumedBy,
          pausedByFailure: result.pause,
          nextRunAt: result.nextRunAt,
        });
      case "unknown":
        throw new HttpError(404, `cannot resume "${name}": ${result.reason}`);
      case "not-paused":
        return reply
          .code(409)
          .send({ error: `cannot resume "${name}": ${result.reason}`, status: result.status });
    }
  });
}

/** The next run times of the schedule in force, none while the task is disabled or has no cron. */
function nextRuns(task: TaskStatus, desired: DesiredState | undefined): Date[] {
  const enabled = task.job?.enabled ?? task.configured?.enabled ?? false;
  const cron = task.job?.cron ?? task.configured?.cron;
  const timezone = task.job?.timezone ?? task.configured?.timezone ?? "UTC";
  if (!enabled || !cron) return [];
  try {
    return nextRunTimes(cron, timezone, new Date(), NEXT_RUNS, calendarsNamed(task, desired));
  } catch {
    return [];
  }
}

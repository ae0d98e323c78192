import type { FastifyInstance } from "fastify";
import { z } from "zod";
import { TASK_NAME_PATTERN } from "../core/taskName.js";
import { UnknownTasksError } from "../status/timeline.js";
import { HttpError } from "./httpErrors.js";
import type { AdminScheduler } from "./schedulerApi.js";
import { isoDate, parseOr400, taskParams } from "./schemas.js";

export const DEFAULT_SLOTS_LIMIT = 10_000;
export const MAX_SLOTS_LIMIT = 50_000;
const DEFAULT_RANGE_MS = 24 * 3_600_000;
const MAX_RANGE_MS = 31 * 24 * 3_600_000;
const MAX_TASKS = 5_000;

const slotsQuery = z
  .object({
    from: isoDate("from").optional(),
    to: isoDate("to").optional(),
    tasks: z
      .string()
      .transform((text) => text.split(",").filter((name) => name.length > 0))
      .pipe(
        z
          .array(z.string().regex(TASK_NAME_PATTERN, "tasks must be task names separated by commas"))
          .max(MAX_TASKS, `tasks may name at most ${MAX_TASKS} tasks; leave it out for all`),
      )
      .optional(),
    cursor: z.string().max(2_000).optional(),
    limit: z
      .string()
      .regex(/^\d+$/, `limit must be a whole number from 1 to ${MAX_SLOTS_LIMIT}`)
      .transform(Number)
      .pipe(z.number().int().min(1).max(MAX_SLOTS_LIMIT, `limit must be at most ${MAX_SLOTS_LIMIT}`))
      .default(DEFAULT_SLOTS_LIMIT),
    bucketMs: z
      .string()
      .regex(/^\d+$/, "bucketMs must be a whole number of milliseconds (0: one mark per run)")
      .transform(Number)
      .pipe(z.number().int().max(86_400_000, "bucketMs must be at most 86400000 (a day)"))
      .optional(),
  })
  .strict();

const runParams = z.object({
  id: z
    .string()
    .regex(
      /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i,
      "a run id is a UUID, as /slots and /tasks/:name/runs give it",
    ),
});

const shardParams = taskParams.extend({ slot: isoDate("slot") });
const shardQuery = z
  .object({
    round: z
      .string()
      .regex(/^[1-9]\d{0,8}$/, "round must be a whole number from 1")
      .optional(),
  })
  .strict();

const shardProgressQuery = slotsQuery.pick({ from: true, to: true, tasks: true }).strict();

const cursorShape = z.object({ task: z.string(), slot: z.string(), id: z.string().uuid() });

/** GET /slots (the timeline), GET /runs/:id (run detail), a sharded slot's shards and slots' shard progress. */
export function timelineRoutes(app: FastifyInstance, scheduler: AdminScheduler): void {
  // a sharded slot's shards (docs/sharding.md, "Seeing it"): state, instance, duration, outcome
  app.get("/tasks/:name/slots/:slot/shards", async (request) => {
    const params = parseOr400(shardParams, request.params, "path");
    const query = parseOr400(shardQuery, request.query, "query");
    const found = await scheduler.shards(
      params.name,
      params.slot,
      query.round ? Number(query.round) : undefined,
    );
    if (!found)
      throw new HttpError(404, `task "${params.name}" has no sharded slot at ${params.slot.toISOString()}`);
    return shardsAnswer(found);
  });

  // the shard progress of the sharded slots in a range (the dashboard's timeline)
  app.get("/sharded-slots", async (request) => {
    const query = parseOr400(shardProgressQuery, request.query, "query");
    const to = query.to ?? new Date();
    const from = query.from ?? new Date(to.getTime() - DEFAULT_RANGE_MS);
    if (from >= to) throw new HttpError(400, "invalid query: from must be before to");
    if (to.getTime() - from.getTime() > MAX_RANGE_MS)
      throw new HttpError(400, "invalid query: the range from..to may span at most 31 days");
    return { slots: await scheduler.shardProgress({ from, to, tasks: query.tasks }) };
  });

  app.get("/slots", async (request) => {
    const query = parseOr400(slotsQuery, request.query, "query");
    const to = query.to ?? new Date();
    const from = query.from ?? new Date(to.getTime() - DEFAULT_RANGE_MS);
    if (from >= to) throw new HttpError(400, "invalid query: from must be before to");
    if (to.getTime() - from.getTime() > MAX_RANGE_MS) {
      throw new HttpError(
        400,
        "invalid query: the range from..to may span at most 31 days; ask for several ranges",
      );
    }
    const cursor = query.cursor === undefined ? undefined : decodeCursor(query.cursor, cursorShape);
    try {
      const page = await scheduler.timeline({
        from,
        to,
        tasks: query.tasks,
        cursor,
        limit: query.limit,
        bucketMs: query.bucketMs,
      });
      return { ...page, nextCursor: page.nextCursor ? encodeCursor(page.nextCursor) : null };
    } catch (error) {
      if (error instanceof UnknownTasksError)
        throw new HttpError(404, `invalid query.tasks: ${error.message}`);
      throw error;
    }
  });

  app.get("/runs/:id", async (request) => {
    const { id } = parseOr400(runParams, request.params, "path");
    const detail = await scheduler.runDetail(id);
    if (!detail) throw new HttpError(404, `no run with id "${id}"`);
    return detail;
  });
}

export function encodeCursor(value: unknown): string {
  return Buffer.from(JSON.stringify(value)).toString("base64url");
}

export function decodeCursor<T extends z.ZodType>(text: string, shape: T): z.output<T> {
  try {
    const parsed = shape.safeParse(JSON.parse(Buffer.from(text, "base64url").toString("utf8")));
    if (parsed.success) return parsed.data;
  } catch {
    // answered below
  }
  throw new HttpError(
    400,
    "invalid query.cursor: not a cursor this endpoint gave; drop it to start from the first page",
  );
}

/** The answer of GET /tasks/:name/slots/:slot/shards. */
function shardsAnswer(found: NonNullable<Awaited<ReturnType<AdminScheduler["shards"]>>>) {
  const { slot, shards } = found;
  const counts: Record<string, number> = {};
  for (const shard of shards) counts[shard.state] = (counts[shard.state] ?? 0) + 1;
  return {
    task: slot.task_name,
    scheduledAt: slot.scheduled_at,
    round: slot.round,
    shardCount: slot.shard_count,
    source: slot.source,
    coordinator: slot.coordinator,
    reduce: {
      state: slot.reduce_state,
      runs: slot.reduce_runs,
      startedAt: slot.reduce_started_at,
      endedAt: slot.reduce_ended_at,
      error: slot.reduce_error,
    },
    outcome: slot.outcome,
    detail: slot.detail,
    endedAt: slot.ended_at,
    counts,
    shards: shards.map((shard) => ({
      index: shard.shard_index,
      state: shard.state,
      instance: shard.holder,
      assignedTo: shard.assigned_to,
      attempts: shard.attempts,
      claims: shard.runs,
      startedAt: shard.started_at,
      endedAt: shard.ended_at,
      durationMs: shard.duration_ms,
      error: shard.error,
    })),
  };
}

import type { FastifyInstance } from "fastify";
import { z } from "zod";
import { MAX_BACKFILL_CONCURRENCY } from "../operations/backfills.js";
import type { SlotActions } from "../scheduler/slotActions.js";
import { type Caller, callerName } from "./auth.js";
import { HttpError } from "./httpErrors.js";
import { isoDate, parseOr400, taskParams } from "./schemas.js";

const VIA = "admin API";
const MAX_SLOTS_LISTED = 5_000;

const slotParams = taskParams.extend({ slot: isoDate("slot") });
const backfillParams = z.object({ id: z.string().uuid("backfill id must be a UUID") });
const reason = z.string().max(500, "reason must be at most 500 characters").optional();

/** POST /tasks/:name/slots/:slot/rerun: `force` for a slot that succeeded; `withDownstream`; `reason`. */
const rerunBody = z
  .union([
    z.undefined(),
    z.null(),
    z.object({ force: z.boolean().optional(), withDownstream: z.boolean().optional(), reason }).strict(),
  ])
  .transform((body) => body ?? {});

/** POST /tasks/:name/backfills. */
const backfillBody = z
  .object({
    from: isoDate("from"),
    to: isoDate("to"),
    mode: z.enum(["missing", "all"], { error: "mode must be missing or all" }).optional(),
    concurrency: z
      .number()
      .int()
      .min(1, `concurrency must be a whole number from 1 to ${MAX_BACKFILL_CONCURRENCY}`)
      .max(
        MAX_BACKFILL_CONCURRENCY,
        `concurrency must be a whole number from 1 to ${MAX_BACKFILL_CONCURRENCY}`,
      )
      .optional(),
    withDownstream: z.boolean().optional(),
    dryRun: z.boolean().optional(),
    reason,
  })
  .strict();

const listQuery = z
  .object({
    task: taskParams.shape.name.optional(),
    limit: z
      .string()
      .regex(/^\d+$/, "limit must be a whole number from 1 to 200")
      .transform(Number)
      .pipe(z.number().int().min(1, "limit must be from 1 to 200").max(200, "limit must be from 1 to 200"))
      .default(50),
  })
  .strict();

const slotsQuery = z
  .object({
    slots: z
      .string()
      .regex(/^\d+$/, `slots must be a whole number from 0 to ${MAX_SLOTS_LISTED}`)
      .transform(Number)
      .pipe(z.number().int().min(0).max(MAX_SLOTS_LISTED, `slots must be at most ${MAX_SLOTS_LISTED}`))
      .default(0),
  })
  .strict();

const cancelBody = z
  .union([z.undefined(), z.null(), z.object({ reason }).strict()])
  .transform((body) => body ?? {});

/**
 * The operator's actions on past slots (docs/operations.md, "Re-run a slot", "Backfill"):
 * POST /tasks/:name/slots/:slot/rerun, POST /tasks/:name/backfills (dryRun lists the slots),
 * GET /backfills, GET /backfills/:id[?slots=N], POST /backfills/:id/cancel. Every POST needs an
 * operator token and is audited with the caller's name and the reason given.
 */
export function slotRoutes(
  app: FastifyInstance,
  scheduler: { slotActions: SlotActions },
  callerOf: (request: { raw: object }) => Caller,
): void {
  const actions = scheduler.slotActions;
  const ready = () => {
    if (!actions.ready) throw new HttpError(503, "the scheduler is still starting; try again in a moment");
  };

  app.post("/tasks/:name/slots/:slot/rerun", async (request, reply) => {
    ready();
    const { name, slot } = parseOr400(slotParams, request.params, "path");
    const body = parseOr400(rerunBody, request.body, "body");
    const result = await actions.rerun(name, slot, {
      requestedBy: callerName(callerOf(request)),
      via: VIA,
      reason: body.reason,
      force: body.force,
      withDownstream: body.withDownstream,
    });
    switch (result.status) {
      case "queued":
        return reply.code(202).send({ ...result, withDownstream: body.withDownstream === true });
      case "unknown":
        throw new HttpError(404, `cannot re-run "${name}" at ${slot.toISOString()}: ${result.reason}`);
      case "refused":
        throw new HttpError(400, result.reason);
      case "conflict":
        return reply
          .code(409)
          .send({ error: `cannot re-run "${name}": ${result.reason}`, status: "conflict" });
    }
  });

  backfillRoutes(app, actions, callerOf, ready);
}

/** POST /tasks/:name/backfills (dryRun lists the slots), GET /backfills[/:id], POST /backfills/:id/cancel. */
function backfillRoutes(
  app: FastifyInstance,
  actions: SlotActions,
  callerOf: (request: { raw: object }) => Caller,
  ready: () => void,
): void {
  app.post("/tasks/:name/backfills", async (request, reply) => {
    ready();
    const { name } = parseOr400(taskParams, request.params, "path");
    const body = parseOr400(backfillBody, request.body, "body");
    const backfill = {
      task: name,
      from: body.from,
      to: body.to,
      mode: body.mode,
      concurrency: body.concurrency,
      withDownstream: body.withDownstream,
      requestedBy: callerName(callerOf(request)),
      reason: body.reason,
    };
    const answer = body.dryRun
      ? await actions.planBackfill(backfill)
      : await actions.createBackfill(backfill, {
          requestedBy: backfill.requestedBy,
          via: VIA,
          reason: body.reason,
        });
    switch (answer.status) {
      case "planned":
        return reply.code(200).send({
          dryRun: true,
          task: name,
          run: answer.slots.filter((slot) => slot.state === "pending").length,
          skip: answer.slots.filter((slot) => slot.state === "skipped").length,
          slots: answer.slots,
        });
      case "created":
        return reply.code(201).send(answer.backfill);
      case "missing":
        throw new HttpError(404, `cannot backfill "${name}": ${answer.reason}`);
      case "invalid":
        throw new HttpError(400, `cannot backfill "${name}": ${answer.reason}`);
      case "overlapping":
        return reply
          .code(409)
          .send({ error: `cannot backfill "${name}": ${answer.reason}`, status: "overlapping" });
    }
  });

  backfillViewRoutes(app, actions, callerOf, ready);
}

/** GET /backfills, GET /backfills/:id[?slots=N], POST /backfills/:id/cancel. */
function backfillViewRoutes(
  app: FastifyInstance,
  actions: SlotActions,
  callerOf: (request: { raw: object }) => Caller,
  ready: () => void,
): void {
  app.get("/backfills", async (request) => {
    ready();
    const query = parseOr400(listQuery, request.query, "query");
    return actions.backfills(query);
  });

  app.get("/backfills/:id", async (request) => {
    ready();
    const { id } = parseOr400(backfillParams, request.params, "path");
    const { slots } = parseOr400(slotsQuery, request.query, "query");
    const backfill = await actions.backfill(id);
    if (!backfill) throw new HttpError(404, `no backfill ${id}`);
    return slots > 0 ? { ...backfill, slotList: await actions.backfillSlots(id, slots) } : backfill;
  });

  app.post("/backfills/:id/cancel", async (request, reply) => {
    ready();
    const { id } = parseOr400(backfillParams, request.params, "path");
    const body = parseOr400(cancelBody, request.body, "body");
    const result = await actions.cancelBackfill(id, {
      requestedBy: callerName(callerOf(request)),
      via: VIA,
      reason: body.reason,
    });
    switch (result.status) {
      case "cancelled":
        return reply.code(200).send(result.backfill);
      case "missing":
        throw new HttpError(404, `no backfill ${id}`);
      case "not-running":
        return reply
          .code(409)
          .send({ error: `backfill ${id} is not running (done or cancelled)`, status: "not-running" });
    }
  });
}

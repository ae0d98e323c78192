import { randomUUID } from "node:crypto";
import type { Pool, PoolClient } from "pg";
import { isoTime } from "../core/isoTime.js";
import { calendarsOf, excludedBy, exclusionReason } from "../core/policies/calendar.js";
import { rowSchedule, slotsBetween } from "../core/policies/schedule.js";
import * as sql from "../engine/sql.js";

/** The most slots one backfill may hold: a larger range is refused with the count. */
export const MAX_BACKFILL_SLOTS = 100_000;
/** The most slots one backfill runs at a time. */
export const MAX_BACKFILL_CONCURRENCY = 100;

/** What a backfill asks (docs/operations.md, "Backfill"). */
export interface BackfillRequest {
  task: string;
  from: Date;
  to: Date;
  /** `missing` (default): slots whose run succeeded are skipped; `all`: every slot runs. */
  mode?: sql.BackfillMode | undefined;
  /** At most this many slots run at a time, across all instances; default 1. */
  concurrency?: number | undefined;
  withDownstream?: boolean | undefined;
  requestedBy: string;
  reason?: string | undefined;
}

/** One slot of a backfill's plan: whether it runs, and why not. */
export interface PlannedSlot {
  slot: Date;
  state: "pending" | "skipped";
  detail: string | null;
}

export interface BackfillProgress {
  id: string;
  task: string;
  from: Date;
  to: Date;
  mode: sql.BackfillMode;
  concurrency: number;
  withDownstream: boolean;
  state: sql.BackfillState;
  requestedBy: string;
  reason: string | null;
  createdAt: Date;
  endedAt: Date | null;
  cancelledBy: string | null;
  /** Slots in each state; `total` is their sum. */
  slots: Record<sql.BackfillSlotState, number> & { total: number };
}

export type BackfillPlanAnswer =
  | { status: "planned"; slots: PlannedSlot[] }
  | { status: "missing" | "invalid" | "overlapping"; reason: string };

export type BackfillCreateAnswer = { status: "created"; backfill: BackfillProgress } | BackfillPlanAnswer;

/**
 * Backfills as durable objects: created with every slot of the range enumerated once (the task's
 * schedule and timezone, DST-aware: src/core/policies/schedule.ts slotsBetween), read back with
 * their progress, cancelled. Running them is the BackfillRunner's (src/engine/backfillRunner.ts).
 */
export class Backfills {
  readonly #pool: Pool;
  /** A backfill was created: this instance claims its first slots at once. */
  readonly #created: () => void;

  constructor(pool: Pool, created: () => void = () => {}) {
    this.#pool = pool;
    this.#created = created;
  }

  /** The slots a backfill of `request` would run or skip (a dry run writes nothing). */
  async plan(request: BackfillRequest, db: sql.Queryable = this.#pool): Promise<BackfillPlanAnswer> {
    const invalid = invalidRequest(request);
    if (invalid) return { status: "invalid", reason: invalid };
    const job = await db.query<{
      repeat_interval: string | null;
      repeat_timezone: string | null;
      policy: unknown;
    }>(
      `SELECT repeat_interval, repeat_timezone, data->'policy' AS policy FROM "${sql.JOBS_TABLE}"
        WHERE name = $1 AND type = 'single'`,
      [request.task],
    );
    const row = job.rows[0];
    if (!row) return { status: "missing", reason: `"${request.task}" has no job: it is not in the config` };
    const schedule = rowSchedule(row.repeat_interval, row.policy);
    if (!schedule)
      return {
        status: "invalid",
        reason: `"${request.task}" has no schedule of its own (a task that runs after others): backfill its upstream with --with-downstream`,
      };
    const listed = slotsBetween(
      schedule,
      row.repeat_timezone ?? "UTC",
      request.from.getTime(),
      request.to.getTime(),
      MAX_BACKFILL_SLOTS + 1,
    );
    if (listed.slots.length > MAX_BACKFILL_SLOTS)
      return {
        status: "invalid",
        reason: `the range holds more than ${MAX_BACKFILL_SLOTS} slots of "${request.task}"; split it into smaller ranges`,
      };
    const succeeded =
      (request.mode ?? "missing") === "missing"
        ? await sql.selectSucceededSlots(db, request.task, request.from, request.to)
        : new Set<string>();
    // the task's calendars (docs/calendars.md): a slot they exclude is not run, as on its day
    const calendars = calendarsOf((row.policy as Record<string, unknown> | null)?.exclude);
    const timezone = row.repeat_timezone ?? "UTC";
    return {
      status: "planned",
      slots: listed.slots.map((at): PlannedSlot => {
        const slot = new Date(at);
        const calendar = calendars.length > 0 ? excludedBy(calendars, at, timezone) : undefined;
        if (calendar !== undefined) return { slot, state: "skipped", detail: exclusionReason(calendar) };
        return succeeded.has(isoTime(slot))
          ? { slot, state: "skipped", detail: "already succeeded (--only-missing)" }
          : { slot, state: "pending", detail: null };
      }),
    };
  }

  /**
   * Creates a backfill, refused while another running backfill of the task meets its range (its
   * slots would run twice). `record` writes the audit row in the same transaction.
   */
  async create(
    request: BackfillRequest,
    record?: (db: PoolClient, backfill: sql.BackfillRow) => Promise<void>,
  ): Promise<BackfillCreateAnswer> {
    const answer = await sql.inTransaction(this.#pool, async (client): Promise<BackfillCreateAnswer> => {
      // one creation per task at a time: two overlapping requests cannot both pass the check below
      await client.query("SELECT pg_advisory_xact_lock(hashtext($1))", [
        `cronwarden backfill ${request.task}`,
      ]);
      const overlapping = await sql.selectOverlappingBackfill(client, request.task, request.from, request.to);
      if (overlapping)
        return {
          status: "overlapping",
          reason: `backfill ${overlapping.id} of "${request.task}" (${isoTime(overlapping.from_at)} to ${isoTime(overlapping.to_at)}) is still running over this range; cancel it or wait for it`,
        };
      const plan = await this.plan(request, client);
      if (plan.status !== "planned") return plan;
      const row = await sql.insertBackfill(
        client,
        {
          id: randomUUID(),
          task: request.task,
          from_at: request.from,
          to_at: request.to,
          mode: request.mode ?? "missing",
          concurrency: request.concurrency ?? 1,
          with_downstream: request.withDownstream === true,
          requested_by: request.requestedBy,
          reason: request.reason ?? null,
        },
        plan.slots,
      );
      await record?.(client, row);
      return { status: "created", backfill: progressOf(row, undefined) };
    });
    if (answer.status !== "created") return answer;
    this.#created();
    return { status: "created", backfill: (await this.get(answer.backfill.id)) ?? answer.backfill };
  }

  async get(id: string): Promise<BackfillProgress | undefined> {
    const row = await sql.selectBackfill(this.#pool, id);
    if (!row) return undefined;
    const counts = await sql.selectBackfillCounts(this.#pool, [id]);
    return progressOf(row, counts.get(id));
  }

  async list(query: { task?: string | undefined; limit: number }): Promise<BackfillProgress[]> {
    const rows = await sql.selectBackfills(this.#pool, query);
    const counts = await sql.selectBackfillCounts(
      this.#pool,
      rows.map((row) => row.id),
    );
    return rows.map((row) => progressOf(row, counts.get(row.id)));
  }

  /** A backfill's slots, oldest first. */
  slots(id: string, limit: number): Promise<sql.BackfillSlotRow[]> {
    return sql.selectBackfillSlots(this.#pool, id, limit);
  }

  /** Cancels a running backfill; `record` writes the audit row in the same transaction. */
  async cancel(
    id: string,
    by: string,
    record?: (db: PoolClient, backfill: sql.BackfillRow) => Promise<void>,
  ): Promise<{ status: "cancelled"; backfill: BackfillProgress } | { status: "missing" | "not-running" }> {
    const cancelled = await sql.inTransaction(this.#pool, async (client) => {
      const row = await sql.cancelBackfill(client, id, by);
      if (row) await record?.(client, row);
      return row;
    });
    if (!cancelled) return { status: (await sql.selectBackfill(this.#pool, id)) ? "not-running" : "missing" };
    return { status: "cancelled", backfill: (await this.get(id)) ?? progressOf(cancelled, undefined) };
  }
}

function invalidRequest(request: BackfillRequest): string | undefined {
  if (Number.isNaN(request.from.getTime()) || Number.isNaN(request.to.getTime()))
    return "from and to must be ISO 8601 times, e.g. 2026-03-03T00:00:00Z";
  if (request.from.getTime() > request.to.getTime())
    return `from (${isoTime(request.from)}) is after to (${isoTime(request.to)}); swap them`;
  const concurrency = request.concurrency ?? 1;
  if (!Number.isInteger(concurrency) || concurrency < 1 || concurrency > MAX_BACKFILL_CONCURRENCY)
    return `concurrency ${concurrency} is not a whole number from 1 to ${MAX_BACKFILL_CONCURRENCY}`;
  return undefined;
}

function progressOf(
  row: sql.BackfillRow,
  counts: Record<sql.BackfillSlotState, number> | undefined,
): BackfillProgress {
  const slots = counts ?? { pending: 0, running: 0, succeeded: 0, failed: 0, skipped: 0, cancelled: 0 };
  return {
    id: row.id,
    task: row.task,
    from: row.from_at,
    to: row.to_at,
    mode: row.mode,
    concurrency: row.concurrency,
    withDownstream: row.with_downstream,
    state: row.state,
    requestedBy: row.requested_by,
    reason: row.reason,
    createdAt: row.created_at,
    endedAt: row.ended_at,
    cancelledBy: row.cancelled_by,
    slots: { ...slots, total: Object.values(slots).reduce((sum, n) => sum + n, 0) },
  };
}

import type { Pool } from "pg";
import { isoTime } from "../core/isoTime.js";
import type { AgendaEngine } from "../engine/agendaEngine.js";
import type { BackfillSlotRow } from "../engine/sql/backfills.js";
import {
  type BackfillCreateAnswer,
  type BackfillPlanAnswer,
  type BackfillProgress,
  type BackfillRequest,
  Backfills,
} from "../operations/backfills.js";
import { type RerunOfSlot, SlotReruns } from "../operations/slotReruns.js";
import type { AuditEntry, AuditLog } from "../store/auditLog.js";

/** Who asked for an operator action on past slots, through what, and why (the audit row). */
export interface ActionCaller {
  /** A user or token name, never a secret. */
  requestedBy: string;
  /** Through what: the audit row's source ("admin API", "scheduler.rerun()"). */
  via: string;
  /** Why, in the operator's words: kept in the audit row. */
  reason?: string | undefined;
}

export interface RerunOptions extends ActionCaller {
  force?: boolean | undefined;
  withDownstream?: boolean | undefined;
}

export type RerunResult =
  | {
      status: "queued";
      taskName: string;
      slot: Date;
      runKey: string;
      requestedBy: string;
      rerunOf: RerunOfSlot;
    }
  | { status: "unknown" | "conflict" | "refused"; taskName: string; reason: string };

export interface SlotActionsDeps {
  engine: Pick<AgendaEngine, "wake" | "backfillCreated" | "prepared">;
  pool: Pool;
  audit: Pick<AuditLog, "record">;
  instanceId: string;
  /** The tasks registered in this service. */
  registry: { has(name: string): boolean };
  /** The config revision in force, for the audit row. */
  revision(): string;
}

/**
 * The operator's actions on past slots (docs/operations.md, "Re-run a slot", "Backfill"), each
 * audited with who asked, when and why, in the same transaction as the action itself.
 */
export class SlotActions {
  readonly #deps: SlotActionsDeps;
  readonly #reruns: SlotReruns;
  readonly #backfills: Backfills;

  constructor(deps: SlotActionsDeps) {
    this.#deps = deps;
    const { engine, pool, instanceId } = deps;
    this.#reruns = new SlotReruns({ pool, instanceId, wake: (job) => engine.wake(job) });
    // a new backfill: every instance claims its first slots now, not at its next idle check
    this.#backfills = new Backfills(pool, () => engine.backfillCreated());
  }

  /** The engine is prepared: before, every action and read is refused (the admin API says 503). */
  get ready(): boolean {
    return this.#deps.engine.prepared;
  }

  /** Re-runs one slot under its own `scheduledAt` and run key (src/operations/slotReruns.ts). */
  async rerun(name: string, slot: Date, options: RerunOptions): Promise<RerunResult> {
    if (!this.#deps.registry.has(name))
      return { status: "unknown", taskName: name, reason: `no task "${name}" is registered in this service` };
    if (Number.isNaN(slot.getTime()))
      return { status: "refused", taskName: name, reason: "the slot must be an ISO 8601 time" };
    const answer = await this.#reruns.request(
      name,
      {
        slot,
        requestedBy: options.requestedBy,
        force: options.force,
        withDownstream: options.withDownstream,
      },
      (db, previous) =>
        this.#deps.audit.record(
          [
            this.#entry(name, "rerun", options, {
              field: isoTime(slot),
              oldValue: previous.outcome,
              newValue: `rerun${options.force ? " (force)" : ""}${options.withDownstream ? " with downstream" : ""}`,
            }),
          ],
          db,
        ),
    );
    const slotText = isoTime(slot);
    switch (answer.status) {
      case "queued":
        return {
          status: "queued",
          taskName: name,
          slot,
          runKey: `${name}@${slotText}`,
          requestedBy: options.requestedBy,
          rerunOf: answer.previous,
        };
      case "missing":
        return {
          status: "unknown",
          taskName: name,
          reason: `"${name}" has no job yet: it is not in the config`,
        };
      case "no-record":
        return {
          status: "unknown",
          taskName: name,
          reason: `no run of "${name}" is recorded for the slot ${slotText}; to run slots that never ran, use a backfill`,
        };
      case "disabled":
        return {
          status: "conflict",
          taskName: name,
          reason: `"${name}" is disabled; enable it to re-run a slot`,
        };
      case "running":
        return {
          status: "conflict",
          taskName: name,
          reason: `"${name}" is running now; try again when it has finished`,
        };
      case "pending":
        return {
          status: "conflict",
          taskName: name,
          reason: `a run or re-run of "${name}" is already requested and has not started; wait for it`,
        };
      case "succeeded":
        return {
          status: "conflict",
          taskName: name,
          reason: `the slot ${slotText} of "${name}" succeeded; to run it again all the same, ask with force`,
        };
    }
  }

  /** The slots a backfill would run (`--dry-run`): nothing is written. */
  planBackfill(request: BackfillRequest): Promise<BackfillPlanAnswer> {
    if (!this.#deps.registry.has(request.task))
      return Promise.resolve({
        status: "missing",
        reason: `no task "${request.task}" is registered in this service`,
      });
    return this.#backfills.plan(request);
  }

  async createBackfill(request: BackfillRequest, caller: ActionCaller): Promise<BackfillCreateAnswer> {
    if (!this.#deps.registry.has(request.task))
      return { status: "missing", reason: `no task "${request.task}" is registered in this service` };
    return this.#backfills.create(request, (db, row) =>
      this.#deps.audit.record(
        [
          this.#entry(request.task, "backfill", caller, {
            field: row.id,
            oldValue: null,
            newValue: `${isoTime(row.from_at)} to ${isoTime(row.to_at)}, ${row.mode === "all" ? "all slots" : "only missing"}, concurrency ${row.concurrency}${row.with_downstream ? ", with downstream" : ""}`,
          }),
        ],
        db,
      ),
    );
  }

  backfill(id: string): Promise<BackfillProgress | undefined> {
    return this.#backfills.get(id);
  }

  backfills(query: { task?: string | undefined; limit: number }): Promise<BackfillProgress[]> {
    return this.#backfills.list(query);
  }

  backfillSlots(id: string, limit: number): Promise<BackfillSlotRow[]> {
    return this.#backfills.slots(id, limit);
  }

  cancelBackfill(id: string, caller: ActionCaller) {
    return this.#backfills.cancel(id, caller.requestedBy, (db, row) =>
      this.#deps.audit.record(
        [
          this.#entry(row.task, "backfill-cancel", caller, {
            field: row.id,
            oldValue: "running",
            newValue: "cancelled",
          }),
        ],
        db,
      ),
    );
  }

  #entry(
    task: string,
    kind: AuditEntry["kind"],
    caller: ActionCaller,
    change: Pick<AuditEntry, "field" | "oldValue" | "newValue">,
  ): AuditEntry {
    const why = caller.reason?.trim();
    return {
      task,
      kind,
      ...change,
      newValue: why ? `${change.newValue ?? ""}; reason: ${why}` : change.newValue,
      source: caller.via,
      revision: this.#deps.revision(),
      instance: this.#deps.instanceId,
      actor: caller.requestedBy,
    };
  }
}

import type { Pool, PoolClient } from "pg";
import { isoTime } from "../core/isoTime.js";
import type { RunOutcome } from "../core/runTypes.js";
import type { WakeJob } from "../engine/jobWrites.js";
import * as sql from "../engine/sql.js";

/** What a re-run request asks (docs/operations.md, "Re-run a slot"). */
export interface RerunRequest {
  /** The slot to run again: its `scheduledAt`. */
  slot: Date;
  /** Who asked (a token's name). */
  requestedBy: string;
  /** A slot whose last run succeeded is re-run only with this. */
  force?: boolean | undefined;
  /** Its downstreams follow the re-run's slot (docs/dependencies.md). */
  withDownstream?: boolean | undefined;
}

/** The slot's last run that the re-run repeats. */
export interface RerunOfSlot {
  outcome: RunOutcome;
  startedAt: Date;
  instanceId: string | null;
}

export type RerunAnswer =
  | { status: "queued"; previous: RerunOfSlot }
  | { status: "missing" | "disabled" | "running" | "pending" | "no-record" }
  | { status: "succeeded"; previous: RerunOfSlot };

/**
 * An operator's re-run of one slot, under the slot's own identity: the request goes into the task's
 * job row as run now's does (src/engine/jobWrites.ts requestRun), so the run takes the row's lock
 * like any other and the one-at-a-time guarantee is the same; it carries the slot and its last
 * run, which the checks before the handler give the run (src/engine/runChecks.ts). The request's
 * transaction locks the job row first: of two concurrent requests, the second finds the first's
 * request in the row and is refused (`pending`), never queued twice.
 */
export class SlotReruns {
  readonly #pool: Pool;
  readonly #instanceId: string;
  readonly #wake: (job: WakeJob) => Promise<void>;

  constructor(deps: { pool: Pool; instanceId: string; wake(job: WakeJob): Promise<void> }) {
    this.#pool = deps.pool;
    this.#instanceId = deps.instanceId;
    this.#wake = deps.wake;
  }

  /** `record` writes the audit row in the same transaction, once the request is accepted. */
  async request(
    taskName: string,
    request: RerunRequest,
    record?: (db: PoolClient, previous: RerunOfSlot) => Promise<void>,
  ): Promise<RerunAnswer> {
    let woken: WakeJob | undefined;
    const answer = await sql.inTransaction(this.#pool, async (client): Promise<RerunAnswer> => {
      const guard = await sql.lockJobForRerun(client, taskName);
      if (!guard) return { status: "missing" };
      if (guard.disabled) return { status: "disabled" };
      if (guard.locked_at) return { status: "running" };
      if (guard.pending) return { status: "pending" };
      if (await sql.backfillSlotRunning(client, taskName, request.slot)) return { status: "running" };
      const last = await sql.selectSlotLastRun(client, taskName, request.slot);
      if (!last) return { status: "no-record" };
      const previous = previousOf(last);
      if (previous.outcome === "succeeded" && request.force !== true)
        return { status: "succeeded", previous };
      const queued = await sql.requestRerun(client, guard.id, {
        by: request.requestedBy,
        instance: this.#instanceId,
        withDownstream: request.withDownstream === true,
        rerun: {
          slot: isoTime(request.slot),
          startedAt: isoTime(previous.startedAt),
          instanceId: previous.instanceId,
        },
      });
      if (request.withDownstream === true) await sql.reopenDownstreamWaits(client, taskName, request.slot);
      await record?.(client, previous);
      woken = { id: queued.id, name: taskName, nextRunAt: queued.next_run_at, priority: 0 };
      return { status: "queued", previous };
    });
    // after the commit: an instance woken earlier would find the row as it was
    if (woken) await this.#wake(woken).catch(() => {});
    return answer;
  }
}

/** The slot's last run: an outcome row's outcome, or a start without one (its run was cut off). */
function previousOf(row: sql.SlotLastRunRow): RerunOfSlot {
  const started = row.started_at ? new Date(row.started_at) : row.timestamp;
  const outcome: RunOutcome =
    row.event === "start"
      ? "interrupted"
      : row.outcome === "succeeded" ||
          row.outcome === "failed" ||
          row.outcome === "skipped" ||
          row.outcome === "interrupted"
        ? row.outcome
        : row.event === "success"
          ? "succeeded"
          : "failed";
  return {
    outcome,
    startedAt: Number.isNaN(started.getTime()) ? row.timestamp : started,
    instanceId: row.instance_id,
  };
}

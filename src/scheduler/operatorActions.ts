import type { Pool } from "pg";
import type { Clock } from "../core/clock.js";
import { clockDate } from "../core/clock.js";
import type { Logger } from "../core/logger.js";
import type { AgendaEngine } from "../engine/agendaEngine.js";
import { describePause } from "../reconcile/configReconciler.js";
import type { ResumeResult, RunNowResult } from "../status/statusModel.js";
import type { AuditLog } from "../store/auditLog.js";
import { SlotActions } from "./slotActions.js";
import type { TaskRegistry } from "./taskRegistry.js";

export interface RunNowOptions {
  /** Who asked: a user or token name, never a secret. Default "in-process". */
  requestedBy?: string;
  /** Through what: the audit row's source. Default "scheduler.runNow()". */
  via?: string;
  /**
   * Its downstreams follow this manual run's slot (docs/dependencies.md, "Run now"); default false:
   * a manual run of an upstream starts no downstream.
   */
  withDownstream?: boolean;
}

/** Who a runNow() without `requestedBy` is recorded as: the process's own code. */
export const IN_PROCESS_CALLER = "in-process";

export interface OperatorActionsDeps {
  engine: Pick<AgendaEngine, "requestRun" | "resume" | "listJobs" | "wake" | "backfillCreated" | "prepared">;
  pool: Pool;
  registry: Pick<TaskRegistry, "has">;
  audit: Pick<AuditLog, "record">;
  logger: Logger;
  clock: Clock;
  instanceId: string;
  /** The revision of the desired state in force, for the audit row ("-" before any). */
  revision: () => string;
}

/**
 * What an operator does to one task besides editing the config (Scheduler.runNow and
 * Scheduler.resume, the admin API, the CLI): each audited with who asked, in the same
 * transaction as its write, and answered with a result that says why when refused.
 */
export class OperatorActions {
  readonly #deps: OperatorActionsDeps;
  /** Re-run a slot, backfill a range (docs/operations.md): src/scheduler/slotActions.ts. */
  readonly slots: SlotActions;

  constructor(deps: OperatorActionsDeps) {
    this.#deps = deps;
    this.slots = new SlotActions(deps);
  }

  /**
   * Runs a task now, once, on whichever instance picks it up first, with the same one-at-a-time
   * guarantee as scheduled runs: refused while a run is in progress or the task is disabled.
   * `requestedBy` names who asked (the admin API passes its token's name); it goes into the run
   * record and, with the request, into the audit trail (kind `run-now`).
   */
  async runNow(name: string, options: RunNowOptions = {}): Promise<RunNowResult> {
    if (!this.#deps.registry.has(name)) {
      return { status: "unknown", taskName: name, reason: `no task "${name}" is registered in this service` };
    }
    const requestedBy = options.requestedBy ?? IN_PROCESS_CALLER;
    const via = options.via ?? "scheduler.runNow()";
    const requestedAt = clockDate(this.#deps.clock);
    const outcome = await this.#deps.engine.requestRun(
      name,
      requestedBy,
      (db) =>
        this.#deps.audit.record(
          [
            {
              task: name,
              kind: "run-now",
              field: "run",
              oldValue: null,
              newValue: `${requestedAt.toISOString()}${options.withDownstream ? " with downstream" : ""}`,
              source: via,
              revision: this.#deps.revision(),
              instance: this.#deps.instanceId,
              actor: requestedBy,
            },
          ],
          db,
        ),
      { withDownstream: options.withDownstream === true },
    );
    switch (outcome) {
      case "queued":
        this.#deps.logger.info(
          { task: name, requestedBy, via },
          `run requested for "${name}" by ${requestedBy}`,
        );
        return { status: "queued", taskName: name, requestedAt, requestedBy };
      case "running":
        return {
          status: "running",
          taskName: name,
          reason: `"${name}" is running now; try again when it has finished`,
        };
      case "disabled": {
        const paused = (await this.#deps.engine.listJobs()).find((job) => job.name === name)?.pausedByFailure;
        return {
          status: "disabled",
          taskName: name,
          reason: paused
            ? `"${name}" is paused by failure (after ${paused.failures} failed slot(s)); resume it first (POST /tasks/${name}/resume, cronwarden resume ${name})`
            : `"${name}" is disabled; enable it in the config to run it`,
        };
      }
      case "missing":
        return {
          status: "unknown",
          taskName: name,
          reason: `"${name}" has no job yet: it is not in the config`,
        };
    }
  }

  /**
   * Resumes a task paused by failure (docs/behaviour.md, "Pause on failure"): enabled again, its
   * failure streak cleared; its next run follows catchUp, as after an enable. Audited (kind
   * `resume`, with who asked) in the same transaction. Refused for an unknown task or one that is
   * not paused.
   */
  async resume(name: string, options: RunNowOptions = {}): Promise<ResumeResult> {
    if (!this.#deps.registry.has(name)) {
      return { status: "unknown", taskName: name, reason: `no task "${name}" is registered in this service` };
    }
    const requestedBy = options.requestedBy ?? IN_PROCESS_CALLER;
    const via = options.via ?? "scheduler.resume()";
    const outcome = await this.#deps.engine.resume(name, true, (db, pause) =>
      this.#deps.audit.record(
        [
          {
            task: name,
            kind: "resume",
            field: "pausedByFailure",
            oldValue: describePause(pause),
            newValue: "resumed",
            source: via,
            revision: this.#deps.revision(),
            instance: this.#deps.instanceId,
            actor: requestedBy,
          },
        ],
        db,
      ),
    );
    switch (outcome.status) {
      case "resumed":
        this.#deps.logger.info(
          { task: name, requestedBy, via, pause: outcome.pause },
          `task "${name}" resumed by ${requestedBy} (it was paused after ${outcome.pause.failures} failed slot(s))`,
        );
        return {
          status: "resumed",
          taskName: name,
          resumedBy: requestedBy,
          pause: outcome.pause,
          nextRunAt: outcome.nextRunAt,
        };
      case "not-paused":
        return {
          status: "not-paused",
          taskName: name,
          reason: `"${name}" is not paused by failure; nothing to resume (enable a disabled task in the config)`,
        };
      case "missing":
        return {
          status: "unknown",
          taskName: name,
          reason: `"${name}" has no job yet: it is not in the config`,
        };
    }
  }
}

import type { Logger } from "./logger.js";
import { type LiveJob, planReconcile, type ReconcileAction, type ReconcilePlan } from "./reconcilePlan.js";
import type { TaskRegistry } from "./taskRegistry.js";
import type { DesiredState } from "./types.js";

/** The part of the engine the reconciler uses. */
export interface ReconcileTarget {
  withReconcileLock<T>(work: () => Promise<T>): Promise<T>;
  listJobs(): Promise<LiveJob[]>;
  createJob(taskName: string, cron: string, timezone: string, enabled: boolean): Promise<void>;
  updateSchedule(taskName: string, cron: string, timezone: string, now: Date): Promise<Date>;
  setEnabled(taskName: string, enabled: boolean): Promise<void>;
}

export interface ReconcileResult {
  revision: string;
  at: Date;
  plan: ReconcilePlan;
  applied: ReconcileAction[];
}

/**
 * Makes runtime follow desired: under a database-wide lock (so instances that see the same
 * change take turns and converge), reads the job rows, plans with `planReconcile` and applies
 * the plan. Nothing else writes schedules.
 */
export class ConfigReconciler {
  readonly #target: ReconcileTarget;
  readonly #registry: TaskRegistry;
  readonly #logger: Logger;
  readonly #now: () => Date;
  #last: ReconcileResult | undefined;

  constructor(
    target: ReconcileTarget,
    registry: TaskRegistry,
    logger: Logger,
    now: () => Date = () => new Date(),
  ) {
    this.#target = target;
    this.#registry = registry;
    this.#logger = logger.child({ component: "reconciler" });
    this.#now = now;
  }

  get lastResult(): ReconcileResult | undefined {
    return this.#last;
  }

  async reconcile(desired: DesiredState): Promise<ReconcileResult> {
    return this.#target.withReconcileLock(async () => {
      const live = await this.#target.listJobs();
      const plan = planReconcile(desired, live, this.#registry.names());
      const liveByName = new Map(live.map((job) => [job.name, job]));
      const applied: ReconcileAction[] = [];
      for (const action of plan.actions) {
        if (await this.#apply(action, liveByName.get(action.task ?? ""))) applied.push(action);
      }
      const result: ReconcileResult = { revision: desired.revision, at: this.#now(), plan, applied };
      this.#last = result;
      this.#logger.info(
        {
          revision: desired.revision,
          changed: applied.length,
          unchanged: plan.unchanged.length,
          rejected: plan.actions.filter((action) => action.kind === "reject").length,
        },
        `reconciled config revision ${desired.revision}: ${applied.length} change(s)`,
      );
      return result;
    });
  }

  /** Applies one action; returns whether it changed the database. */
  async #apply(action: ReconcileAction, job: LiveJob | undefined): Promise<boolean> {
    const context = { task: action.task, action: action.kind, reason: action.reason };
    switch (action.kind) {
      case "create":
        await this.#target.createJob(action.task, action.cron, action.timezone, action.enabled);
        this.#logger.info(
          { ...context, cron: action.cron, timezone: action.timezone, enabled: action.enabled },
          `created job "${action.task}" (${action.cron}, ${action.timezone}, ${action.enabled ? "enabled" : "disabled"})`,
        );
        return true;
      case "update": {
        const nextRunAt = await this.#target.updateSchedule(
          action.task,
          action.cron,
          action.timezone,
          this.#now(),
        );
        this.#logger.info(
          { ...context, changes: action.changes, nextRunAt },
          `re-timed "${action.task}": ${action.reason}`,
        );
        return true;
      }
      case "enable":
      case "disable":
        await this.#target.setEnabled(action.task, action.kind === "enable");
        this.#logger.info(context, `${action.kind}d "${action.task}": ${action.reason}`);
        return true;
      case "reject": {
        const kept = job
          ? `the task keeps its schedule "${job.cron}" (${job.timezone}, ${job.disabled ? "disabled" : "enabled"})`
          : "no job is created for it";
        this.#logger.error(context, `${action.reason}; ${kept}`);
        return false;
      }
      case "orphan":
        this.#logger.warn(context, action.reason);
        return false;
    }
  }
}

import type { DesiredState } from "../config/desiredState.js";
import type { DependencySpec } from "../core/dependencies/spec.js";
import type { Logger } from "../core/logger.js";
import type { Calendar } from "../core/policies/calendar.js";
import type { CatchUpPolicy } from "../core/policies/catchUp.js";
import type { OverlapPolicy } from "../core/policies/overlap.js";
import type { AuditEntry } from "../store/auditLog.js";
import { applyAction } from "./actionWrites.js";
import { auditEntries } from "./auditEntries.js";
import { applyFirstInBatches, batchTarget } from "./batchApply.js";
import { forEachConcurrently } from "./concurrently.js";
import { type LiveJob, planReconcile, type ReconcileAction, type ReconcilePlan } from "./reconcilePlan.js";
import { replaceRows } from "./rowsDigest.js";
import { changedTasks } from "./scopedPlan.js";
import { type ConvergedStore, SharedConverged } from "./sharedConverged.js";

/** Actions applied at once; leaves most of a default pool of 10 to the runs. */
const APPLY_CONCURRENCY = 4;

/** The part of the engine the reconciler uses. */
export interface ReconcileTarget {
  readonly instanceId: string;
  withReconcileLock<T>(work: () => Promise<T>): Promise<T>;
  listJobs(): Promise<LiveJob[]>;
  /** The rows of these tasks only; optional: without it every config change reads every row. */
  listJobsNamed?(names: readonly string[]): Promise<LiveJob[]>;
  /**
   * A digest of the job rows' columns the planner reads; equal digests, equal plans. Optional:
   * without it every anti-entropy pass reads and plans every row.
   */
  plannedColumnsDigest?(): Promise<string>;
  /**
   * The same digest of the named rows alone and, with `all`, of every row (src/reconcile/rowsDigest.ts).
   * Optional: without it every config change reads and plans every row.
   */
  plannedDigests?(names: readonly string[], all: boolean): Promise<{ all?: string; named: string }>;
  createJob(
    taskName: string,
    cron: string,
    timezone: string,
    enabled: boolean,
    after?: DependencySpec,
  ): Promise<void>;
  updateSchedule(taskName: string, cron: string, timezone: string, now: Date): Promise<Date>;
  /** Makes the row a downstream keeping `after` (no schedule of its own), or a plain row again (null). */
  setDependency(taskName: string, after: DependencySpec | null): Promise<void>;
  setEnabled(taskName: string, enabled: boolean): Promise<void>;
  /** Stores a task's catchUp policy in its job row (read back at each run's start). */
  setPolicy(taskName: string, catchUp: CatchUpPolicy): Promise<void>;
  /** Stores a task's jitter in its job row and re-times an idle future next run to it. */
  setJitter(taskName: string, jitterMs: number, now: Date): Promise<void>;
  /** Stores a task's overlap policy in its job row (read by each run). */
  setOverlap(taskName: string, overlap: OverlapPolicy): Promise<void>;
  /** Stores a task's pauseOnFailure in its job row (null: never pauses). */
  setPauseOnFailure(taskName: string, pauseOnFailure: number | null): Promise<void>;
  /** Stores the calendars whose slots a task skips (empty: none) in its job row (read by each run). */
  setExclude(taskName: string, calendars: Calendar[]): Promise<void>;
  /** Clears a pause by failure; the task is enabled, or stays disabled (`enabled` false). */
  resume(taskName: string, enabled: boolean): Promise<{ status: string }>;
  /**
   * Optional, all three or none: createJob, updateSchedule and setEnabled for many rows in one
   * statement per batch (src/engine/jobBatchWrites.ts). Each answers the names it wrote; a name
   * left out is written alone with the one-row method.
   */
  createJobs?(
    jobs: readonly { name: string; cron: string; timezone: string; enabled: boolean }[],
  ): Promise<Set<string>>;
  updateSchedules?(
    changes: readonly { name: string; cron: string; timezone: string }[],
    now: Date,
  ): Promise<Map<string, Date>>;
  setEnabledMany?(changes: readonly { name: string; enabled: boolean }[]): Promise<void>;
}

/** Where applied changes and the applied snapshot are kept (the store); optional in tests. */
export interface ReconcileRecorder {
  /** Read once, in order; a reconcile passes a generator (see AuditLog.record). */
  recordAudit(entries: Iterable<AuditEntry>): Promise<void>;
  saveApplied(state: DesiredState, appliedBy: string): Promise<void>;
  /** The instances' shared record of the last converged pass (src/reconcile/sharedConverged.ts). */
  converged?: ConvergedStore;
}

/**
 * Why a reconcile runs: a new config version (or the first one at start-up), the durable
 * last-known snapshot (config source unreachable at start-up), or the periodic full pass that
 * repairs drift (rows edited or deleted by hand, a lost next run).
 */
export type ReconcileTrigger = "config" | "stored" | "anti-entropy";

export interface ReconcileResult {
  revision: string;
  trigger: ReconcileTrigger;
  at: Date;
  plan: ReconcilePlan;
  applied: ReconcileAction[];
  /** Tasks whose job is enabled after this reconcile (what the fleet guard compares the next snapshot with). */
  enabledTasks: Set<string>;
}

/** The names of the tasks this code registered (the scheduler's TaskRegistry). */
export interface RegisteredNames {
  names(): ReadonlySet<string>;
}

/**
 * Makes runtime follow desired: under a database-wide lock (so instances that see the same
 * change take turns and converge), reads the job rows, plans with `planReconcile` and applies
 * the plan, recording each change in the audit trail. Nothing else writes schedules.
 */
export class ConfigReconciler {
  readonly #target: ReconcileTarget;
  readonly #registry: RegisteredNames;
  readonly #logger: Logger;
  readonly #recorder: ReconcileRecorder | undefined;
  readonly #now: () => Date;
  readonly #shared: SharedConverged;
  #last: ReconcileResult | undefined;
  /**
   * The last pass that found nothing to apply, with the rows' digest read before its plan: an
   * anti-entropy pass with the same desired state and the same digest would plan the same, so it
   * answers this plan without reading the rows (at 10,000 tasks a full pass allocated about 20 MB
   * every minute). A pass that applies anything, or fails, forgets it; a pass of a few changed
   * entries keeps the digest after its writes (#scopedPass).
   */
  #converged:
    | {
        desired: DesiredState;
        digest: string;
        registered: number;
        plan: ReconcilePlan;
        enabledTasks: Set<string>;
      }
    | undefined;

  constructor(options: {
    target: ReconcileTarget;
    registry: RegisteredNames;
    logger: Logger;
    recorder?: ReconcileRecorder;
    now?: () => Date;
  }) {
    this.#target = options.target;
    this.#registry = options.registry;
    this.#logger = options.logger.child({ component: "reconciler" });
    this.#recorder = options.recorder;
    this.#now = options.now ?? (() => new Date());
    this.#shared = new SharedConverged(options.recorder?.converged, this.#logger);
  }

  get lastResult(): ReconcileResult | undefined {
    return this.#last;
  }

  async reconcile(desired: DesiredState, trigger: ReconcileTrigger = "config"): Promise<ReconcileResult> {
    // an anti-entropy pass that finds the converged digest writes nothing, so it needs no lock:
    // one statement a minute when idle instead of three (lock, digest, unlock), on one connection
    if (trigger === "anti-entropy") {
      const digest = await this.#target.plannedColumnsDigest?.();
      const unchanged = this.#unchangedSince(desired, digest);
      if (unchanged) return this.#noDrift(unchanged);
    }
    return this.#target.withReconcileLock(async () => {
      // a config change of a few entries, on rows still as the last converged pass left them
      const scoped = trigger === "config" ? await this.#scopedPass(desired) : undefined;
      if (scoped) return scoped;
      const result = await this.#pass(desired, trigger);
      if (result.applied.length > 0) await this.#confirm(desired, result);
      return result;
    });
  }

  /**
   * After a pass that applied changes, one more read and plan under the same lock, as the next
   * anti-entropy pass would do: when it finds nothing to apply, its digest is kept as converged,
   * so the anti-entropy passes that follow answer from the digest from the first one on. The full
   * read happens once per change either way; here it comes while the change's own writes have
   * just grown the heap, not a minute later in an idle process (where that read would grow V8's
   * young generation for good). Drift it finds is repaired
   * and logged as an anti-entropy pass's; a failure is left to the next anti-entropy pass.
   */
  async #confirm(desired: DesiredState, applying: ReconcileResult): Promise<void> {
    // without a digest, or with a one-shot, converged is never used
    if (!this.#target.plannedColumnsDigest || desired.tasks.some((task) => task.at !== undefined)) return;
    try {
      await this.#pass(desired, "anti-entropy");
    } catch (error) {
      this.#logger.warn(
        { err: error, revision: desired.revision },
        "the read after applying a reconcile failed; the next anti-entropy pass reads the rows again",
      );
    } finally {
      this.#last = applying;
    }
  }

  /** One read of every row, plan and apply; the caller holds the reconcile lock. */
  async #pass(desired: DesiredState, trigger: ReconcileTrigger): Promise<ReconcileResult> {
    // read before the rows: a change landing in between makes the next digest differ, never
    // the other way round
    const digest = await this.#target.plannedColumnsDigest?.();
    const unchanged = trigger === "anti-entropy" ? this.#unchangedSince(desired, digest) : undefined;
    if (unchanged) return this.#noDrift(unchanged);
    this.#converged = undefined;
    const live = await this.#target.listJobs();
    const plan = planReconcile(desired, live, this.#registry.names(), this.#now());
    const result = await this.#applyPlan(desired, trigger, plan, live, undefined);
    if (digest !== undefined && result.applied.length === 0) {
      this.#converged = {
        desired,
        digest,
        registered: this.#registry.names().size,
        plan,
        enabledTasks: result.enabledTasks,
      };
      await this.#shared.record(desired, this.#registry.names(), digest);
    }
    return result;
  }

  /**
   * A config change planned for the entries it changed alone (src/reconcile/scopedPlan.ts): when
   * the last converged pass was of the previous snapshot and every other row is still as it left
   * them, they match the new snapshot already, so only the changed tasks' rows are read. Whether
   * they are is known after the writes, from one digest of every row: less the changed rows as
   * they are now, plus as they were when read (src/reconcile/rowsDigest.ts), it must be the
   * converged digest, or the one another instance recorded for this same snapshot
   * (src/reconcile/sharedConverged.ts). The changed rows are right either way (planned from
   * their own read); anything else (drift) is then read and planned in full, in the same pass.
   * Undefined: a full pass is needed (no converged pass, too many changes).
   */
  async #scopedPass(desired: DesiredState): Promise<ReconcileResult | undefined> {
    const converged = this.#converged;
    const readNamed = this.#target.listJobsNamed?.bind(this.#target);
    const digests = this.#target.plannedDigests?.bind(this.#target);
    const registered = this.#registry.names();
    if (!converged || !readNamed || !digests || converged.registered !== registered.size) return undefined;
    const scope = changedTasks(converged.desired, desired);
    if (!scope) return undefined;
    const names = [...scope];
    const [live, before] = await Promise.all([readNamed(names), digests(names, false)]);
    this.#converged = undefined;
    const plan = planReconcile(desired, live, registered, this.#now(), scope);
    const result = await this.#applyPlan(desired, "config", plan, live, converged.enabledTasks);
    const after = await digests(names, true);
    const was = after.all === undefined ? undefined : replaceRows(after.all, after.named, before.named);
    if (
      after.all === undefined ||
      was === undefined ||
      (was !== converged.digest && !(await this.#shared.converged(desired, registered, was)))
    ) {
      const full = await this.#pass(desired, "config");
      const merged = { ...full, applied: [...result.applied, ...full.applied] };
      if (full.applied.length > 0) await this.#confirm(desired, merged);
      return merged;
    }
    // the plan an anti-entropy pass answers with: nothing to write; the orphans out of scope are the previous pass's
    const quiet = plan.actions.filter((action) => action.kind === "reject" || action.kind === "orphan");
    const orphans = converged.plan.actions.filter(
      (action) => action.kind === "orphan" && !scope.has(action.task),
    );
    this.#converged = {
      desired,
      digest: after.all,
      registered: registered.size,
      plan: { actions: [...quiet, ...orphans], unchanged: desired.tasks.map((task) => task.name) },
      enabledTasks: result.enabledTasks,
    };
    await this.#shared.record(desired, registered, after.all);
    return result;
  }

  /** Applies a plan made from `live`, audits it, keeps the snapshot (a config pass) and logs the outcome. */
  async #applyPlan(
    desired: DesiredState,
    trigger: ReconcileTrigger,
    plan: ReconcilePlan,
    live: readonly LiveJob[],
    enabledBefore: ReadonlySet<string> | undefined,
  ): Promise<ReconcileResult> {
    const liveByName = new Map(live.map((job) => [job.name, job]));
    const applied: ReconcileAction[] = [];
    const { done, failure } = await this.#apply(plan, liveByName, trigger);
    plan.actions.forEach((action, index) => {
      if (done[index]) applied.push(action);
    });
    const instance = this.#target.instanceId;
    // generated as they are written: a 10,000-task start has 40,000 entries
    const audit = function* (): Generator<AuditEntry> {
      for (const action of applied)
        yield* auditEntries(action, liveByName.get(action.task ?? ""), trigger, desired, instance);
    };
    // what was applied is audited even when a later action failed (the retry will not redo it)
    await this.#recorder?.recordAudit(audit());
    if (failure !== undefined) throw failure;
    if (trigger === "config") await this.#recorder?.saveApplied(desired, this.#target.instanceId);
    const result: ReconcileResult = {
      revision: desired.revision,
      trigger,
      at: this.#now(),
      plan,
      applied,
      enabledTasks: enabledAfter(enabledBefore, live, applied),
    };
    this.#last = result;
    const summary = {
      revision: desired.revision,
      trigger,
      changed: applied.length,
      unchanged: plan.unchanged.length,
      rejected: plan.actions.filter((action) => action.kind === "reject").length,
    };
    if (trigger !== "anti-entropy" || applied.length > 0) {
      this.#logger.info(
        summary,
        `reconciled config revision ${desired.revision} (${trigger}): ${applied.length} change(s)`,
      );
    } else {
      this.#logger.debug(summary, "anti-entropy pass: no drift");
    }
    return result;
  }

  /**
   * Applies a plan: each task's actions in order (a create before the policy it carries), tasks
   * side by side. The first action of each task goes in batches of many rows where the target
   * can (src/reconcile/batchApply.ts); the rest, a few at a time (each touches its own task's
   * row). `done[i]`: action i changed the database. After a failure no new write starts.
   */
  async #apply(
    plan: ReconcilePlan,
    liveByName: ReadonlyMap<string, LiveJob>,
    trigger: ReconcileTrigger,
  ): Promise<{ done: boolean[]; failure: unknown }> {
    const done: boolean[] = [];
    let failure: unknown;
    const byTask = new Map<string, number[]>();
    plan.actions.forEach((action, index) => {
      const key = action.task ?? `#${index}`;
      const indexes = byTask.get(key);
      if (indexes) indexes.push(index);
      else byTask.set(key, [index]);
    });
    let rest = [...byTask.values()];
    const batches = batchTarget(this.#target);
    if (batches) {
      const context = { trigger, now: this.#now, logger: this.#logger, liveByName };
      await applyFirstInBatches(
        batches,
        plan.actions,
        rest.map(([first]) => first as number),
        done,
        context,
      ).catch((error: unknown) => {
        failure = error;
      });
      rest = rest.map((indexes) => (done[indexes[0] as number] ? indexes.slice(1) : indexes));
      rest = rest.filter((indexes) => indexes.length > 0);
    }
    if (failure !== undefined) return { done, failure };
    await forEachConcurrently(rest, APPLY_CONCURRENCY, async (indexes) => {
      for (const index of indexes) {
        const action = plan.actions[index] as ReconcileAction;
        done[index] = await applyAction(this.#target, action, liveByName.get(action.task ?? ""), {
          trigger,
          now: this.#now,
          logger: this.#logger,
        });
      }
    }).catch((error: unknown) => {
      failure = error;
    });
    return { done, failure };
  }

  /**
   * The anti-entropy pass's answer when the desired state and the rows' digest are the last
   * converged pass's: the same plan, nothing to apply. Undefined when a full pass is needed.
   */
  #unchangedSince(desired: DesiredState, digest: string | undefined): ReconcileResult | undefined {
    const converged = this.#converged;
    if (
      !converged ||
      digest === undefined ||
      converged.digest !== digest ||
      converged.desired !== desired ||
      converged.registered !== this.#registry.names().size ||
      // a one-shot's plan depends on the clock (a time that passed)
      desired.tasks.some((task) => task.at !== undefined)
    )
      return undefined;
    return {
      revision: desired.revision,
      trigger: "anti-entropy",
      at: this.#now(),
      plan: converged.plan,
      applied: [],
      enabledTasks: converged.enabledTasks,
    };
  }

  /** An anti-entropy pass answered from the last converged plan (the rows' digest unchanged). */
  #noDrift(result: ReconcileResult): ReconcileResult {
    this.#last = result;
    this.#logger.debug(
      { revision: result.revision, trigger: result.trigger, unchanged: result.plan.unchanged.length },
      "anti-entropy pass: no drift (the job rows' digest is the last converged pass's)",
    );
    return result;
  }
}

/**
 * The registered tasks enabled once `applied` is: the fleet guard's next baseline. `base`: those
 * enabled before a pass that read only some rows (`live`).
 */
function enabledAfter(
  base: ReadonlySet<string> | undefined,
  live: readonly LiveJob[],
  applied: readonly ReconcileAction[],
): Set<string> {
  const enabled = new Set(base ?? []);
  for (const job of live) {
    if (job.disabled) enabled.delete(job.name);
    else enabled.add(job.name);
  }
  for (const action of applied) {
    if (
      action.kind === "enable" ||
      (action.kind === "create" && action.enabled) ||
      (action.kind === "resume" && action.enabled)
    )
      enabled.add(action.task);
    else if (action.kind === "disable") enabled.delete(action.task);
  }
  return enabled;
}

export { describePause } from "./auditEntries.js";

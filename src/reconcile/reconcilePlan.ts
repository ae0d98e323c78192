import type { DesiredState, DesiredTask } from "../config/desiredState.js";
import { describeRejection } from "../config/desiredState.js";
import { closestName } from "../config/fleetGuard.js";
import { type DependencySpec, describeSpec, sameSpec } from "../core/dependencies/spec.js";
import { unregisteredUpstreams } from "./dependencyPlan.js";

/**
 * The reconcile decision (docs/design.md, "Reconcile choices") as a pure function: desired state + the live job rows +
 * the registered names -> the actions that make runtime follow desired, each with its reason.
 * It touches nothing; `ConfigReconciler` applies the plan.
 */

/** A task's job row as the planner needs it. */
export interface LiveJob {
  name: string;
  disabled: boolean;
  cron: string | null;
  timezone: string | null;
  nextRunAt: Date | null;
  /** The dependency the row keeps (docs/dependencies.md); null or absent for a task with its own cron. */
  after?: DependencySpec | null;
}

export type ReconcileAction =
  | {
      kind: "create";
      task: string;
      cron: string;
      timezone: string;
      enabled: boolean;
      reason: string;
      /** A downstream: its row has no cron of its own, and keeps this spec. */
      after?: DependencySpec;
    }
  | {
      kind: "update";
      task: string;
      cron: string;
      timezone: string;
      changes: FieldChange[];
      reason: string;
      after?: DependencySpec;
    }
  | { kind: "enable"; task: string; reason: string }
  | { kind: "disable"; task: string; reason: string }
  /** An entry refused (unknown name, invalid field); the task keeps its previous state. */
  | { kind: "reject"; task: string | undefined; reason: string }
  /** A job row whose task is not registered in code: left untouched, reported. */
  | { kind: "orphan"; task: string; reason: string };

export interface FieldChange {
  field: "cron" | "timezone" | "nextRunAt" | "after";
  from: string | null;
  to: string;
}

export interface ReconcilePlan {
  actions: ReconcileAction[];
  /** Tasks whose row already matches the desired state. */
  unchanged: string[];
}

export function planReconcile(
  desired: DesiredState,
  live: readonly LiveJob[],
  registered: ReadonlySet<string>,
): ReconcilePlan {
  const actions: ReconcileAction[] = [];
  const unchanged: string[] = [];
  const liveByName = new Map(live.map((job) => [job.name, job]));
  const desiredNames = new Set(desired.tasks.map((task) => task.name));
  // A task whose entry was refused keeps its last valid schedule: it is not "missing" from the config.
  const refusedNames = new Set(
    desired.rejected.map((entry) => entry.name).filter((name) => name !== undefined),
  );

  for (const entry of desired.rejected) {
    actions.push({ kind: "reject", task: entry.name, reason: describeRejection(entry) });
  }

  const unregisteredUpstream = unregisteredUpstreams(desired.tasks, registered);
  for (const task of desired.tasks) {
    const upstreamProblem = unregisteredUpstream.get(task.name);
    if (upstreamProblem && registered.has(task.name)) {
      actions.push({
        kind: "reject",
        task: task.name,
        reason: `config entry "${task.name}" is rejected: after ${upstreamProblem}`,
      });
      continue;
    }
    if (!registered.has(task.name)) {
      const guess = closestName(task.name, registered);
      actions.push({
        kind: "reject",
        task: task.name,
        reason: `config entry "${task.name}" is rejected: no task of that name is registered in code; ${guess ? `did you mean "${guess}"? ` : ""}register it or fix the name (names are case-sensitive)`,
      });
      continue;
    }
    const job = liveByName.get(task.name);
    if (!job) {
      actions.push({
        kind: "create",
        task: task.name,
        cron: task.cron,
        timezone: task.timezone,
        enabled: task.enabled,
        reason: `no job yet for "${task.name}"`,
        ...(task.after ? { after: task.after } : {}),
      });
      continue;
    }
    const taskActions = planExistingJob(task, job);
    if (taskActions.length === 0) unchanged.push(task.name);
    actions.push(...taskActions);
  }

  for (const name of [...registered].sort()) {
    if (desiredNames.has(name) || refusedNames.has(name)) continue;
    const job = liveByName.get(name);
    if (job && !job.disabled) {
      actions.push({
        kind: "disable",
        task: name,
        reason: `"${name}" is registered but not in the config from ${desired.source}; disabled (not deleted) until the config enables it`,
      });
    }
  }

  for (const job of live) {
    if (!registered.has(job.name)) {
      actions.push({
        kind: "orphan",
        task: job.name,
        reason: `job "${job.name}" exists in the database but no task of that name is registered in this code; left untouched`,
      });
    }
  }

  return { actions, unchanged };
}

function planExistingJob(task: DesiredTask, job: LiveJob): ReconcileAction[] {
  const actions: ReconcileAction[] = [];
  const changes: FieldChange[] = [];
  if (!sameSpec(job.after, task.after))
    changes.push({
      field: "after",
      from: job.after ? describeSpec(job.after) : null,
      to: describeSpec(task.after),
    });
  // a downstream's row has no schedule of its own: its runs are queued by its upstreams
  const downstream = task.after !== undefined;
  if (!downstream && job.cron !== task.cron) changes.push({ field: "cron", from: job.cron, to: task.cron });
  if (!downstream && job.timezone !== task.timezone)
    changes.push({ field: "timezone", from: job.timezone, to: task.timezone });
  if (!downstream && changes.length === 0 && job.nextRunAt === null && task.enabled) {
    changes.push({ field: "nextRunAt", from: null, to: "next slot from now" });
  }
  if (changes.length > 0) {
    actions.push({
      kind: "update",
      task: task.name,
      cron: task.cron,
      timezone: task.timezone,
      changes,
      ...(task.after ? { after: task.after } : {}),
      reason: changes
        .map((change) => `${change.field} ${change.from ?? "(none)"} -> ${change.to}`)
        .join(", "),
    });
  }
  if (task.enabled && job.disabled) {
    actions.push({ kind: "enable", task: task.name, reason: "enabled in the config" });
  } else if (!task.enabled && !job.disabled) {
    actions.push({ kind: "disable", task: task.name, reason: "disabled in the config" });
  }
  return actions;
}

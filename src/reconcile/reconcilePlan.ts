import type { DesiredState, DesiredTask } from "../config/desiredState.js";
import { describeRejection } from "../config/desiredState.js";
import { closestName } from "../config/fleetGuard.js";
import { type DependencySpec, describeSpec, sameSpec } from "../core/dependencies/spec.js";
import { type Calendar, calendarsKey, describeCalendars } from "../core/policies/calendar.js";
import { type CatchUpPolicy, DEFAULT_CATCH_UP, formatDuration } from "../core/policies/catchUp.js";
import { DEFAULT_OVERLAP, type OverlapPolicy } from "../core/policies/overlap.js";
import type { PauseMark } from "../core/policies/pauseOnFailure.js";
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
  /** The catchUp policy stored in the row; absent: the default. */
  catchUp?: CatchUpPolicy;
  /** The jitter stored in the row (ms); absent: none. */
  jitterMs?: number;
  /** The overlap policy stored in the row; absent: the default (skip). */
  overlap?: OverlapPolicy;
  /** The pauseOnFailure stored in the row; absent: never pauses. */
  pauseOnFailure?: number;
  /** The calendars stored in the row (docs/calendars.md); absent: none. */
  exclude?: Calendar[];
  /** Set while the task is paused by failure (the row is disabled): src/core/policies/pauseOnFailure.ts. */
  pausedByFailure?: PauseMark;
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
  /** The task's policies changed (stored in its row; the schedule and next run stay). */
  | { kind: "policy"; task: string; catchUp: CatchUpPolicy; from: CatchUpPolicy; reason: string }
  /** The task's jitter changed (stored in its row; an idle future next run is re-timed to it). */
  | { kind: "jitter"; task: string; jitterMs: number; fromMs: number; reason: string }
  /** The task's overlap policy changed (stored in its row). */
  | { kind: "overlap"; task: string; overlap: OverlapPolicy; from: OverlapPolicy; reason: string }
  /** The task's pauseOnFailure changed (stored in its row; null: never pauses). */
  | {
      kind: "pauseOnFailure";
      task: string;
      pauseOnFailure: number | null;
      from: number | null;
      reason: string;
    }
  /** The calendars whose slots the task skips changed (stored in its row; empty: none). */
  | { kind: "exclude"; task: string; exclude: Calendar[]; from: Calendar[]; reason: string }
  /**
   * A task paused by failure whose config entry changed: the pause is cleared, and the task is
   * enabled again, or stays disabled when its entry disables it (or left the config).
   */
  | { kind: "resume"; task: string; enabled: boolean; pause: PauseMark; reason: string }
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
  /** Decides whether an `at:` one-shot that the task does not hold yet is in the past. */
  now: Date = new Date(),
  /**
   * Plan only these tasks (src/reconcile/scopedPlan.ts): `live` holds their rows, and every other
   * task of `desired` is reported unchanged (its row matched the last applied snapshot).
   */
  scope?: ReadonlySet<string>,
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
    const refusal = refusalOf(task, registered, unregisteredUpstream, liveByName.get(task.name), now);
    if (refusal) {
      actions.push({ kind: "reject", task: task.name, reason: refusal });
      continue;
    }
    if (scope && !scope.has(task.name)) {
      unchanged.push(task.name);
      continue;
    }
    const job = liveByName.get(task.name);
    if (!job) {
      actions.push(...planNewJob(task));
      continue;
    }
    const taskActions = planExistingJob(task, job);
    if (taskActions.length === 0) unchanged.push(task.name);
    actions.push(...taskActions);
  }

  for (const name of [...(scope ?? registered)].sort()) {
    if (!registered.has(name)) continue;
    if (desiredNames.has(name) || refusedNames.has(name)) continue;
    const action = planLeftOut(name, liveByName.get(name), desired.source);
    if (action) actions.push(action);
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

/** Why a valid entry is still refused by the planner (its code, its upstreams, a one-shot past), or undefined. */
function refusalOf(
  task: DesiredTask,
  registered: ReadonlySet<string>,
  unregisteredUpstream: ReadonlyMap<string, string>,
  job: LiveJob | undefined,
  now: Date,
): string | undefined {
  const upstreamProblem = unregisteredUpstream.get(task.name);
  if (upstreamProblem && registered.has(task.name))
    return `config entry "${task.name}" is rejected: after ${upstreamProblem}`;
  if (!registered.has(task.name)) {
    const guess = closestName(task.name, registered);
    return `config entry "${task.name}" is rejected: no task of that name is registered in code; ${guess ? `did you mean "${guess}"? ` : ""}register it or fix the name (names are case-sensitive)`;
  }
  return oneShotInThePast(task, job, now);
}

/** A task with no row yet: its row, then each policy that differs from the defaults. */
function planNewJob(task: DesiredTask): ReconcileAction[] {
  const actions: ReconcileAction[] = [
    {
      kind: "create",
      task: task.name,
      cron: task.cron,
      timezone: task.timezone,
      enabled: task.enabled,
      reason: `no job yet for "${task.name}"`,
      ...(task.after ? { after: task.after } : {}),
    },
  ];
  if (task.catchUp && !samePolicy(task.catchUp, DEFAULT_CATCH_UP))
    actions.push(policyAction(task.name, task.catchUp, DEFAULT_CATCH_UP));
  if (task.jitterMs) actions.push(jitterAction(task.name, task.jitterMs, 0));
  if (task.overlap && task.overlap !== DEFAULT_OVERLAP)
    actions.push(overlapAction(task.name, task.overlap, DEFAULT_OVERLAP));
  if (task.pauseOnFailure) actions.push(pauseOnFailureAction(task.name, task.pauseOnFailure, null));
  if (task.exclude) actions.push(excludeAction(task.name, task.exclude, []));
  return actions;
}

/** A registered task left out of the config: disabled (not deleted), or its pause cleared and left disabled. */
function planLeftOut(name: string, job: LiveJob | undefined, source: string): ReconcileAction | undefined {
  if (job?.pausedByFailure) {
    // out of the config counts as disabled by it: the pause is cleared, the task stays disabled
    return {
      kind: "resume",
      task: name,
      enabled: false,
      pause: job.pausedByFailure,
      reason: `"${name}" is paused by failure and no longer in the config from ${source}; the pause is cleared, the task stays disabled until the config enables it`,
    };
  }
  if (job && !job.disabled) {
    return {
      kind: "disable",
      task: name,
      reason: `"${name}" is registered but not in the config from ${source}; disabled (not deleted) until the config enables it`,
    };
  }
  return undefined;
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
  // a one-shot without a next run has run: it is completed, not lost
  // (a paused task keeps what it had: a resume re-times it if needed)
  if (
    !downstream &&
    changes.length === 0 &&
    job.nextRunAt === null &&
    task.enabled &&
    task.at === undefined &&
    !job.pausedByFailure
  ) {
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
  const catchUp = task.catchUp ?? DEFAULT_CATCH_UP;
  const stored = job.catchUp ?? DEFAULT_CATCH_UP;
  if (!samePolicy(catchUp, stored)) actions.push(policyAction(task.name, catchUp, stored));
  if ((task.jitterMs ?? 0) !== (job.jitterMs ?? 0))
    actions.push(jitterAction(task.name, task.jitterMs ?? 0, job.jitterMs ?? 0));
  if ((task.overlap ?? DEFAULT_OVERLAP) !== (job.overlap ?? DEFAULT_OVERLAP))
    actions.push(overlapAction(task.name, task.overlap ?? DEFAULT_OVERLAP, job.overlap ?? DEFAULT_OVERLAP));
  if ((task.pauseOnFailure ?? null) !== (job.pauseOnFailure ?? null))
    actions.push(pauseOnFailureAction(task.name, task.pauseOnFailure ?? null, job.pauseOnFailure ?? null));
  if (calendarsKey(task.exclude) !== calendarsKey(job.exclude))
    actions.push(excludeAction(task.name, task.exclude ?? [], job.exclude ?? []));
  if (job.pausedByFailure) {
    // Paused by failure: not drift. The row stays disabled until the entry changes (any field,
    // as the row stores it) or the entry disables the task; then the pause is cleared first.
    const pause = job.pausedByFailure;
    if (!task.enabled)
      actions.unshift({
        kind: "resume",
        task: task.name,
        enabled: false,
        pause,
        reason:
          "paused by failure and disabled in the config: the pause is cleared, the task stays disabled until the config enables it",
      });
    else if (actions.length > 0)
      actions.unshift({
        kind: "resume",
        task: task.name,
        enabled: true,
        pause,
        reason: `paused by failure; its config entry changed (${actions.map((action) => action.reason).join("; ")}): resumed`,
      });
    return actions;
  }
  if (task.enabled && job.disabled) {
    actions.push({ kind: "enable", task: task.name, reason: "enabled in the config" });
  } else if (!task.enabled && !job.disabled) {
    actions.push({ kind: "disable", task: task.name, reason: "disabled in the config" });
  }
  return actions;
}

function samePolicy(a: CatchUpPolicy, b: CatchUpPolicy): boolean {
  return a.runs === b.runs && a.windowMs === b.windowMs;
}

export function describeCatchUp(policy: CatchUpPolicy): string {
  return `{ window: ${formatDuration(policy.windowMs)}, runs: ${policy.runs} }`;
}

function policyAction(task: string, catchUp: CatchUpPolicy, from: CatchUpPolicy): ReconcileAction {
  return {
    kind: "policy",
    task,
    catchUp,
    from,
    reason: `catchUp ${describeCatchUp(from)} -> ${describeCatchUp(catchUp)}`,
  };
}

/**
 * An `at:` time in the past is refused, unless the task already holds that very one-shot (it has
 * run, or is about to: it shows as completed, the entry may stay in the config).
 */
function oneShotInThePast(task: DesiredTask, job: LiveJob | undefined, now: Date): string | undefined {
  if (task.at === undefined || job?.cron === task.cron) return undefined;
  if (Date.parse(task.at) > now.getTime()) return undefined;
  return `config entry "${task.name}": at ${JSON.stringify(task.at)} is invalid: is in the past (now is ${now.toISOString()}); a one-shot needs a future time; the task keeps its schedule`;
}

function jitterAction(task: string, jitterMs: number, fromMs: number): ReconcileAction {
  return {
    kind: "jitter",
    task,
    jitterMs,
    fromMs,
    reason: `jitter ${fromMs ? formatDuration(fromMs) : "none"} -> ${jitterMs ? formatDuration(jitterMs) : "none"}`,
  };
}

function pauseOnFailureAction(
  task: string,
  pauseOnFailure: number | null,
  from: number | null,
): ReconcileAction {
  const show = (value: number | null) => (value === null ? "never" : `after ${value} failed slot(s)`);
  return {
    kind: "pauseOnFailure",
    task,
    pauseOnFailure,
    from,
    reason: `pauseOnFailure ${show(from)} -> ${show(pauseOnFailure)}`,
  };
}

function excludeAction(task: string, exclude: Calendar[], from: Calendar[]): ReconcileAction {
  const names = describeCalendars(exclude);
  const reason =
    names === describeCalendars(from)
      ? `exclude ${names}: a calendar's days changed`
      : `exclude ${describeCalendars(from)} -> ${names}`;
  return { kind: "exclude", task, exclude, from, reason };
}

function overlapAction(task: string, overlap: OverlapPolicy, from: OverlapPolicy): ReconcileAction {
  return { kind: "overlap", task, overlap, from, reason: `overlap ${from} -> ${overlap}` };
}

import { describeSpec } from "../core/dependencies/spec.js";
import type { Logger } from "../core/logger.js";
import { describeCalendars } from "../core/policies/calendar.js";
import type { ReconcileTarget, ReconcileTrigger } from "./configReconciler.js";
import type { LiveJob, ReconcileAction } from "./reconcilePlan.js";

/** What one write did, for its log line. */
export interface Written {
  message: string;
  fields: Record<string, unknown>;
}

type WriteAction = Exclude<ReconcileAction, { kind: "reject" | "orphan" }>;

/**
 * Applies one action of a reconcile plan to the job rows and logs it (a repair of drift at warn,
 * as such); a refused entry and an orphan row are only logged, once per snapshot. Returns
 * whether it changed the database.
 */
export async function applyAction(
  target: ReconcileTarget,
  action: ReconcileAction,
  job: LiveJob | undefined,
  options: { trigger: ReconcileTrigger; now: () => Date; logger: Logger },
): Promise<boolean> {
  const { trigger, logger } = options;
  const drift = trigger === "anti-entropy";
  const context = { task: action.task, action: action.kind, reason: action.reason, trigger };
  if (action.kind === "reject") {
    if (drift) return false; // already reported when this snapshot was applied
    const kept = job
      ? `the task keeps its schedule "${job.cron}" (${job.timezone}, ${job.disabled ? "disabled" : "enabled"})`
      : "no job is created for it";
    logger.error(context, `${action.reason}; ${kept}`);
    return false;
  }
  if (action.kind === "orphan") {
    if (!drift) logger.warn(context, action.reason);
    return false;
  }
  const written = await write(target, action, job, options.now);
  if (!written) return false;
  reportWritten(action, written, trigger, logger);
  return true;
}

/** The log line of one applied write: a repair of drift at warn, as such; a change at info. */
export function reportWritten(
  action: ReconcileAction,
  written: Written,
  trigger: ReconcileTrigger,
  logger: Logger,
): void {
  const context = { task: action.task, action: action.kind, reason: action.reason, trigger };
  if (trigger === "anti-entropy")
    logger.warn({ ...context, ...written.fields, drift: true }, `drift repaired: ${written.message}`);
  else logger.info({ ...context, ...written.fields }, written.message);
}

/** What a create wrote, for its log line. */
export function createdWritten(action: Extract<ReconcileAction, { kind: "create" }>): Written {
  const task = action.task;
  return {
    message: `created job "${task}" (${action.after ? describeSpec(action.after) : action.cron}, ${action.timezone}, ${action.enabled ? "enabled" : "disabled"})`,
    fields: {
      before: null,
      after: { cron: action.cron, timezone: action.timezone, enabled: action.enabled },
    },
  };
}

/** What a re-timing wrote, for its log line. */
export function retimedWritten(
  action: Extract<ReconcileAction, { kind: "update" }>,
  nextRunAt: Date,
): Written {
  return {
    message: `re-timed "${action.task}": ${action.reason}`,
    fields: { changes: action.changes, nextRunAt },
  };
}

/** What an enable or disable wrote, for its log line. */
export function flagWritten(
  action: Extract<ReconcileAction, { kind: "enable" | "disable" }>,
  job: LiveJob | undefined,
): Written {
  return {
    message: `${action.kind}d "${action.task}": ${action.reason}`,
    fields: {
      before: { enabled: job ? !job.disabled : null },
      after: { enabled: action.kind === "enable" },
    },
  };
}

/** The write of one action; undefined when it found nothing to change (a resume another instance did first). */
async function write(
  target: ReconcileTarget,
  action: WriteAction,
  job: LiveJob | undefined,
  now: () => Date,
): Promise<Written | undefined> {
  const task = action.task;
  switch (action.kind) {
    case "create":
      await target.createJob(task, action.cron, action.timezone, action.enabled, action.after);
      return createdWritten(action);
    case "update": {
      if (action.changes.some((change) => change.field === "after"))
        await target.setDependency(task, action.after ?? null);
      if (action.after)
        return {
          message: `changed the dependency of "${task}": ${action.reason}`,
          fields: { changes: action.changes },
        };
      const nextRunAt = await target.updateSchedule(task, action.cron, action.timezone, now());
      return retimedWritten(action, nextRunAt);
    }
    case "resume": {
      // only a row still paused is changed: an instance that resumed it first wins, once
      const result = await target.resume(task, action.enabled);
      if (result.status !== "resumed") return undefined;
      return {
        message: `resumed "${task}" (paused by failure): ${action.reason}`,
        fields: {
          before: { enabled: false, pausedByFailure: action.pause },
          after: { enabled: action.enabled },
        },
      };
    }
    case "enable":
    case "disable":
      await target.setEnabled(task, action.kind === "enable");
      return flagWritten(action, job);
    default:
      return writePolicy(target, action, now);
  }
}

/** A policy stored in the row: catchUp, overlap, jitter, pauseOnFailure or exclude (calendars). */
async function writePolicy(
  target: ReconcileTarget,
  action: Extract<ReconcileAction, { kind: "policy" | "overlap" | "jitter" | "pauseOnFailure" | "exclude" }>,
  now: () => Date,
): Promise<Written> {
  const { task, reason } = action;
  switch (action.kind) {
    case "policy":
      await target.setPolicy(task, action.catchUp);
      return {
        message: `policy of "${task}": ${reason}`,
        fields: { before: { catchUp: action.from }, after: { catchUp: action.catchUp } },
      };
    case "overlap":
      await target.setOverlap(task, action.overlap);
      return {
        message: `overlap of "${task}": ${reason}`,
        fields: { before: { overlap: action.from }, after: { overlap: action.overlap } },
      };
    case "jitter":
      await target.setJitter(task, action.jitterMs, now());
      return {
        message: `jitter of "${task}": ${reason}`,
        fields: { before: { jitterMs: action.fromMs }, after: { jitterMs: action.jitterMs } },
      };
    case "pauseOnFailure":
      await target.setPauseOnFailure(task, action.pauseOnFailure);
      return {
        message: `pauseOnFailure of "${task}": ${reason}`,
        fields: { before: { pauseOnFailure: action.from }, after: { pauseOnFailure: action.pauseOnFailure } },
      };
    case "exclude":
      await target.setExclude(task, action.exclude);
      return {
        message: `calendars of "${task}": ${reason}`,
        fields: {
          before: { exclude: describeCalendars(action.from) },
          after: { exclude: describeCalendars(action.exclude) },
        },
      };
  }
}

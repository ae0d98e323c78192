import type { DesiredState } from "../config/desiredState.js";
import { describeSpec } from "../core/dependencies/spec.js";
import { describeCalendars } from "../core/policies/calendar.js";
import { formatDuration } from "../core/policies/catchUp.js";
import type { PauseMark } from "../core/policies/pauseOnFailure.js";
import type { AuditEntry } from "../store/auditLog.js";
import type { ReconcileTrigger } from "./configReconciler.js";
import { describeCatchUp, type LiveJob, type ReconcileAction } from "./reconcilePlan.js";

/** The fields every audit row of one applied action shares. */
type AuditBase = Pick<AuditEntry, "task" | "kind" | "source" | "revision" | "instance">;

/**
 * The audit rows of one applied action (src/store/auditLog.ts): one per field it changed, old and
 * new value as an operator reads them; `drift` for an anti-entropy repair, `change` otherwise.
 * A refused entry and an orphan row change nothing and have none.
 */
export function auditEntries(
  action: ReconcileAction,
  job: LiveJob | undefined,
  trigger: ReconcileTrigger,
  desired: DesiredState,
  instance: string,
): AuditEntry[] {
  if (action.kind === "reject" || action.kind === "orphan") return [];
  const base: AuditBase = {
    task: action.task,
    kind: trigger === "anti-entropy" ? "drift" : "change",
    source: desired.source,
    revision: desired.revision,
    instance,
  };
  switch (action.kind) {
    case "create":
      return [
        { ...base, field: "job", oldValue: null, newValue: "created" },
        { ...base, field: "cron", oldValue: null, newValue: action.cron },
        { ...base, field: "timezone", oldValue: null, newValue: action.timezone },
        { ...base, field: "enabled", oldValue: null, newValue: String(action.enabled) },
        ...(action.after
          ? [{ ...base, field: "after", oldValue: null, newValue: describeSpec(action.after) }]
          : []),
      ];
    case "update":
      return action.changes.map((change) => ({
        ...base,
        field: change.field,
        oldValue: change.from,
        newValue: change.to,
      }));
    case "resume":
      return [
        {
          ...base,
          field: "pausedByFailure",
          oldValue: describePause(action.pause),
          newValue: action.enabled ? "resumed (config entry changed)" : "cleared (disabled in the config)",
        },
      ];
    case "enable":
    case "disable":
      return [
        {
          ...base,
          field: "enabled",
          oldValue: job ? String(!job.disabled) : null,
          newValue: String(action.kind === "enable"),
        },
      ];
    default:
      return [policyEntry(action, base)];
  }
}

/** The one audit row of a policy change: catchUp, overlap, jitter, pauseOnFailure or exclude. */
function policyEntry(
  action: Extract<ReconcileAction, { kind: "policy" | "overlap" | "jitter" | "pauseOnFailure" | "exclude" }>,
  base: AuditBase,
): AuditEntry {
  switch (action.kind) {
    case "policy":
      return {
        ...base,
        field: "catchUp",
        oldValue: describeCatchUp(action.from),
        newValue: describeCatchUp(action.catchUp),
      };
    case "overlap":
      return { ...base, field: "overlap", oldValue: action.from, newValue: action.overlap };
    case "jitter":
      return {
        ...base,
        field: "jitter",
        oldValue: action.fromMs ? formatDuration(action.fromMs) : null,
        newValue: action.jitterMs ? formatDuration(action.jitterMs) : null,
      };
    case "pauseOnFailure":
      return {
        ...base,
        field: "pauseOnFailure",
        oldValue: action.from === null ? null : String(action.from),
        newValue: action.pauseOnFailure === null ? null : String(action.pauseOnFailure),
      };
    case "exclude":
      return {
        ...base,
        field: "exclude",
        oldValue: describeCalendars(action.from),
        newValue: describeCalendars(action.exclude),
      };
  }
}

/** A pause mark as the audit trail shows it. */
export function describePause(pause: PauseMark): string {
  return `paused ${pause.at.toISOString()} after ${pause.failures} failed slot(s)${pause.lastError ? `: ${pause.lastError}` : ""}`;
}

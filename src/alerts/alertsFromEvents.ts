import type {
  ConfigErrorEvent,
  ConfigRejectedEvent,
  MissedSlotEvent,
  RunFinishedEvent,
  RunTroubleEvent,
  TaskPausedEvent,
} from "../scheduler/events.js";
import type { Alert } from "./alert.js";

/**
 * Scheduler events -> alerts, as pure functions. Which failures deserve an alert at all (final
 * or not) is the Alerter's decision; these only say what the alert reads.
 */

type Origin = { instanceId: string; at: Date };

export function runFailureAlert(event: RunFinishedEvent, origin: Origin): Alert | undefined {
  const error = event.error;
  if (event.outcome !== "failed" || error?.name === "LockLostError") return undefined; // lock-lost alert covers it
  const timedOut = error?.name === "RunTimeoutError";
  const message = error?.message ?? "failed without an error";
  return {
    event: timedOut ? "run:timed-out" : "run:failed",
    task: event.taskName,
    severity: "error",
    summary: timedOut
      ? `task "${event.taskName}" timed out (slot ${iso(event.scheduledAt)}, attempt ${event.attempt}): ${firstLine(message)}`
      : `task "${event.taskName}" failed (slot ${iso(event.scheduledAt)}, attempt ${event.attempt}): ${firstLine(message)}`,
    details: {
      ...runDetails(event),
      durationMs: event.durationMs,
      error: message,
      errorName: error?.name ?? null,
    },
    ...origin,
  };
}

export function lockLostAlert(event: RunTroubleEvent, origin: Origin): Alert {
  return {
    event: "run:lock-lost",
    task: event.taskName,
    severity: "error",
    summary: `task "${event.taskName}" lost its lock (slot ${iso(event.scheduledAt)}): ${event.reason}; another instance may run this slot again`,
    details: { ...runDetails(event), reason: event.reason },
    ...origin,
  };
}

export function abandonedAlert(event: RunTroubleEvent, origin: Origin): Alert {
  return {
    event: "run:abandoned",
    task: event.taskName,
    severity: "critical",
    summary: `task "${event.taskName}" abandoned (slot ${iso(event.scheduledAt)}): ${event.reason}; its handler may still be running`,
    details: { ...runDetails(event), reason: event.reason },
    ...origin,
  };
}

export function missedSlotAlert(event: MissedSlotEvent, origin: Origin): Alert {
  const slot = event.scheduledAt ? iso(event.scheduledAt) : null;
  return {
    event: "missed-slot",
    task: event.taskName,
    severity: "error",
    summary: `task "${event.taskName}" missed ${slot ? `its slot ${slot}` : "its next run"}: ${event.reason}`,
    details: { scheduledAt: slot, detectedAt: iso(event.detectedAt), reason: event.reason },
    ...origin,
  };
}

export function taskPausedAlert(event: TaskPausedEvent, origin: Origin): Alert {
  return {
    event: "task:paused",
    task: event.taskName,
    severity: "error",
    summary: `task "${event.taskName}" paused after ${event.failures} failed slot(s) in a row${event.lastError ? ` (last error: ${firstLine(event.lastError)})` : ""}; it runs again when its config entry changes or after POST /tasks/${event.taskName}/resume`,
    details: {
      pausedAt: iso(event.at),
      failures: event.failures,
      scheduledAt: event.slot ? iso(event.slot) : null,
      lastError: event.lastError,
    },
    ...origin,
  };
}

export function configRejectedAlert(event: ConfigRejectedEvent, origin: Origin): Alert {
  return {
    event: "config:rejected",
    task: event.taskName ?? null,
    severity: "warning",
    summary: `config entry ${event.taskName ? `"${event.taskName}" ` : ""}refused (revision ${event.revision}): ${event.reason}; the task keeps its previous state`,
    details: { revision: event.revision, reason: event.reason },
    ...origin,
  };
}

export function configErrorAlert(event: ConfigErrorEvent, origin: Origin): Alert {
  return {
    event: "config:error",
    task: null,
    severity: "error",
    summary: `config source ${event.source} cannot be read (the last valid config stays in force): ${firstLine(event.error.message)}`,
    details: { source: event.source, error: event.error.message },
    ...origin,
  };
}

function runDetails(event: RunTroubleEvent | RunFinishedEvent): Alert["details"] {
  return {
    scheduledAt: iso(event.scheduledAt),
    startedAt: iso(event.startedAt),
    attempt: event.attempt,
    trigger: event.trigger,
    rerun: event.rerun,
    runInstanceId: event.instanceId,
  };
}

/** Summaries are one line; the details keep the whole message. */
function firstLine(text: string, max = 300): string {
  const line = text.split("\n", 1)[0]?.trim() ?? "";
  return line.length > max ? `${line.slice(0, max - 1)}…` : line;
}

function iso(date: Date): string {
  return date.toISOString();
}

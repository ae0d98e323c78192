import { type CatchUpPolicy, DEFAULT_CATCH_UP, formatDuration } from "../core/policies/catchUp.js";
import { scheduleOf } from "../core/policies/schedule.js";
import type { RunSummaryRow } from "../engine/sql.js";
import type { TaskJob } from "../engine/types.js";
import type { RunOutcome, TaskStatus } from "./status.js";
import type { RegisteredTask } from "./taskRegistry.js";
import type { DesiredState } from "./types.js";

/** Joins registry, desired state, job rows and run summaries into one view per task. */
export function buildTaskStatuses(input: {
  registered: RegisteredTask[];
  desired: DesiredState | undefined;
  jobs: TaskJob[];
  summaries: RunSummaryRow[];
}): TaskStatus[] {
  const jobs = new Map(input.jobs.map((job) => [job.name, job]));
  const configured = new Map((input.desired?.tasks ?? []).map((task) => [task.name, task]));
  const summaries = new Map(input.summaries.map((row) => [row.job_name, row]));
  const registered = new Map(input.registered.map((task) => [task.name, task]));
  const names = [...new Set([...registered.keys(), ...jobs.keys()])].sort();

  return names.map((name) => {
    const job = jobs.get(name);
    const entry = configured.get(name);
    const summary = summaries.get(name);
    // a run is in progress when the row is locked after a start that has not finished
    const running = Boolean(
      job?.lockedAt &&
        job.lastRunAt &&
        (!job.lastFinishedAt || job.lastRunAt.getTime() > job.lastFinishedAt.getTime()),
    );
    const lastOutcome = asOutcome(summary?.last_outcome);
    return {
      name,
      registered: registered.has(name),
      description: registered.get(name)?.description ?? null,
      configured: entry
        ? {
            enabled: entry.enabled,
            cron: entry.cron,
            timezone: entry.timezone,
            ...(entry.every ? { every: entry.every } : {}),
            ...(entry.at ? { at: entry.at } : {}),
            ...(entry.jitterMs ? { jitter: formatDuration(entry.jitterMs) } : {}),
            catchUp: catchUpView(entry.catchUp ?? DEFAULT_CATCH_UP),
          }
        : null,
      job: job
        ? {
            enabled: !job.disabled,
            cron: job.cron,
            timezone: job.timezone,
            catchUp: catchUpView(job.catchUp ?? DEFAULT_CATCH_UP),
            // an `at:` one-shot that has run: done, not failed or lost
            ...(job.cron !== null && scheduleOf(job.cron).kind === "at"
              ? { completed: job.nextRunAt === null && job.lastFinishedAt !== null }
              : {}),
            nextRunAt: job.nextRunAt,
            lastRunAt: job.lastRunAt,
            lastFinishedAt: job.lastFinishedAt,
          }
        : null,
      running,
      // the instance that locked the job: Agenda writes it with the lock
      runningOn: running ? (job?.lastModifiedBy ?? null) : null,
      lastOutcome,
      lastError: lastOutcome === "failed" ? (summary?.last_error ?? null) : null,
      consecutiveFailures: summary?.consecutive_failures ?? 0,
      recentOutcomes: (summary?.recent_outcomes ?? []).map(asOutcome).filter((outcome) => outcome !== null),
    };
  });
}

function asOutcome(value: string | null | undefined): RunOutcome | null {
  return value === "succeeded" || value === "failed" || value === "skipped" || value === "interrupted"
    ? value
    : null;
}

/** A catchUp policy as the config writes it: `{ window: "1h", runs: "latest" }`. */
function catchUpView(policy: CatchUpPolicy): { window: string; runs: string } {
  return { window: formatDuration(policy.windowMs), runs: policy.runs };
}

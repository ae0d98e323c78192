import type { LatestRunRow } from "../engine/sql.js";
import type { TaskJob } from "../engine/types.js";
import type { RunOutcome, TaskStatus } from "./status.js";
import type { RegisteredTask } from "./taskRegistry.js";
import type { DesiredState } from "./types.js";

/** Joins registry, desired state, job rows and the latest run records into one view per task. */
export function buildTaskStatuses(input: {
  registered: RegisteredTask[];
  desired: DesiredState | undefined;
  jobs: TaskJob[];
  latest: LatestRunRow[];
}): TaskStatus[] {
  const jobs = new Map(input.jobs.map((job) => [job.name, job]));
  const configured = new Map((input.desired?.tasks ?? []).map((task) => [task.name, task]));
  const outcomes = new Map(
    input.latest.filter((row) => row.kind === "outcome").map((row) => [row.job_name, row]),
  );
  const starts = new Map(
    input.latest.filter((row) => row.kind === "start").map((row) => [row.job_name, row]),
  );
  const registered = new Map(input.registered.map((task) => [task.name, task]));
  const names = [...new Set([...registered.keys(), ...jobs.keys()])].sort();

  return names.map((name) => {
    const job = jobs.get(name);
    const entry = configured.get(name);
    const outcome = outcomes.get(name);
    // a run is in progress when the row is locked after a start that has not finished
    const running = Boolean(
      job?.lockedAt &&
        job.lastRunAt &&
        (!job.lastFinishedAt || job.lastRunAt.getTime() > job.lastFinishedAt.getTime()),
    );
    const start = starts.get(name);
    return {
      name,
      registered: registered.has(name),
      description: registered.get(name)?.description ?? null,
      configured: entry ? { enabled: entry.enabled, cron: entry.cron, timezone: entry.timezone } : null,
      job: job
        ? {
            enabled: !job.disabled,
            cron: job.cron,
            timezone: job.timezone,
            nextRunAt: job.nextRunAt,
            lastRunAt: job.lastRunAt,
            lastFinishedAt: job.lastFinishedAt,
          }
        : null,
      running,
      runningOn: running ? (start?.agenda_name ?? null) : null,
      lastOutcome: outcomeOf(outcome),
      lastError: outcome && outcomeOf(outcome) === "failed" ? (outcome.error ?? null) : null,
      consecutiveFailures: job?.failCount ?? 0,
    };
  });
}

function outcomeOf(row: LatestRunRow | undefined): RunOutcome | null {
  const value = row?.meta?.outcome;
  return value === "succeeded" || value === "failed" || value === "skipped" ? value : null;
}

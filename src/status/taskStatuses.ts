import type { DesiredState } from "../config/desiredState.js";
import { type CatchUpPolicy, DEFAULT_CATCH_UP, formatDuration } from "../core/policies/catchUp.js";
import { scheduleOf } from "../core/policies/schedule.js";
import type { RunSummary, TaskJob } from "../engine/engineApi.js";
import type { TaskStatus } from "./statusModel.js";

/** Joins registry, desired state, job rows and run summaries into one view per task. */
export function buildTaskStatuses(input: {
  /** The tasks registered in this instance's code. */
  registered: ReadonlyArray<{ name: string; description: string | undefined }>;
  desired: DesiredState | undefined;
  jobs: TaskJob[];
  summaries: RunSummary[];
}): TaskStatus[] {
  const jobs = new Map(input.jobs.map((job) => [job.name, job]));
  const configured = new Map((input.desired?.tasks ?? []).map((task) => [task.name, task]));
  const summaries = new Map(input.summaries.map((summary) => [summary.taskName, summary]));
  const registered = new Map(input.registered.map((task) => [task.name, task]));
  const names = [...new Set([...registered.keys(), ...jobs.keys()])].sort();
  const downstreams = new Map<string, string[]>();
  for (const job of input.jobs)
    for (const upstream of job.after?.upstreams ?? [])
      downstreams.set(upstream, downstreams.get(upstream)?.concat(job.name) ?? [job.name]);

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
    const lastOutcome = summary?.lastOutcome ?? null;
    return {
      name,
      registered: registered.has(name),
      description: registered.get(name)?.description ?? null,
      configured: entry ? configuredView(entry) : null,
      job: job ? jobView(job) : null,
      state: !job ? "no-job" : job.pausedByFailure ? "paused" : job.disabled ? "disabled" : "enabled",
      running,
      // the instance that locked the job: Agenda writes it with the lock
      runningOn: running ? (job?.lastModifiedBy ?? null) : null,
      lastOutcome,
      lastError: lastOutcome === "failed" ? (summary?.lastError ?? null) : null,
      consecutiveFailures: summary?.consecutiveFailures ?? 0,
      consecutiveFailedAttempts: summary?.consecutiveFailedAttempts ?? 0,
      recentOutcomes: summary?.recentOutcomes ?? [],
      dependencies: {
        upstreams: job?.after?.upstreams ?? [],
        downstreams: downstreams.get(name) ?? [],
        when: job?.after?.when ?? null,
        waitAtMost: job?.after?.waitAtMost ?? null,
      },
    };
  });
}

/** A task's config entry as the status shows it. */
function configuredView(entry: DesiredState["tasks"][number]) {
  return {
    enabled: entry.enabled,
    cron: entry.cron,
    timezone: entry.timezone,
    ...(entry.every ? { every: entry.every } : {}),
    ...(entry.at ? { at: entry.at } : {}),
    ...(entry.jitterMs ? { jitter: formatDuration(entry.jitterMs) } : {}),
    catchUp: catchUpView(entry.catchUp ?? DEFAULT_CATCH_UP),
    ...(entry.pauseOnFailure ? { pauseOnFailure: entry.pauseOnFailure } : {}),
    ...(entry.exclude ? { exclude: entry.exclude.map((calendar) => calendar.name) } : {}),
  };
}

/** A task's job row as the status shows it. */
function jobView(job: TaskJob) {
  return {
    enabled: !job.disabled,
    cron: job.cron,
    timezone: job.timezone,
    catchUp: catchUpView(job.catchUp ?? DEFAULT_CATCH_UP),
    // an `at:` one-shot that has run: done, not failed or lost
    ...(job.cron !== null && scheduleOf(job.cron).kind === "at"
      ? { completed: job.nextRunAt === null && job.lastFinishedAt !== null }
      : {}),
    ...(job.pauseOnFailure ? { pauseOnFailure: job.pauseOnFailure } : {}),
    ...(job.exclude ? { exclude: job.exclude.map((calendar) => calendar.name) } : {}),
    ...(job.pausedByFailure ? { pausedByFailure: job.pausedByFailure } : {}),
    nextRunAt: job.nextRunAt,
    lastRunAt: job.lastRunAt,
    lastFinishedAt: job.lastFinishedAt,
  };
}

/** A catchUp policy as the config writes it: `{ window: "1h", runs: "latest" }`. */
function catchUpView(policy: CatchUpPolicy): { window: string; runs: string } {
  return { window: formatDuration(policy.windowMs), runs: policy.runs };
}

import { nextRunTimes } from "../config/cronValidator.js";
import type { TaskStatus } from "../status/statusModel.js";
import type { MetricSet } from "./definitions.js";

/**
 * Sets the per-task gauges from one `scheduler.status()` (the database's view, shared by every
 * instance): enabled, next run, consecutive failures, and the last success (the later of the
 * database's and this instance's events). Creates the per-task counters the alert rules watch
 * at 0 for every task that has none yet.
 */
export function setStatusGauges(
  metrics: MetricSet,
  tasks: readonly TaskStatus[],
  lastSuccessSeen: ReadonlyMap<string, number>,
  now: Date = new Date(),
): void {
  metrics.nextRunOverdue.reset();
  metrics.expectedInterval.reset();
  metrics.enabled.reset();
  metrics.nextRun.reset();
  metrics.consecutiveFailures.reset();
  metrics.lastSuccess.reset();
  const lastSuccess = new Map(lastSuccessSeen);
  for (const task of tasks) {
    const labels = { task: task.name };
    const enabled = task.job?.enabled ?? task.configured?.enabled;
    if (enabled !== undefined) metrics.enabled.set(labels, enabled ? 1 : 0);
    // a downstream's next run is a queued slot of its upstreams (in the past by design), not a schedule
    if (task.job?.enabled && task.job.nextRunAt && task.dependencies.upstreams.length === 0) {
      metrics.nextRun.set(labels, seconds(task.job.nextRunAt));
      metrics.nextRunOverdue.set(labels, Math.max(0, (now.getTime() - task.job.nextRunAt.getTime()) / 1000));
      const interval = expectedIntervalSeconds(task.job.cron, task.job.timezone, now);
      if (interval !== undefined) metrics.expectedInterval.set(labels, interval);
    }
    metrics.consecutiveFailures.set(labels, task.consecutiveFailures);
    // the counters behind the one-event alert rules, at 0 before their first event: increase()
    // has no sample before a series' first one, so a series that first appears at 1 (its first
    // event) would never raise CronwardenMissedSlot, CronwardenLockLost or CronwardenRunAbandoned.
    // 3 series per task (at 10,000 tasks 30,000 more, about 1.5 MB of scrape text); runs_total is
    // left alone: the failure-ratio rule does not depend on one attempt
    metrics.missedSlots.inc(labels, 0);
    metrics.lockLosses.inc(labels, 0);
    metrics.abandoned.inc(labels, 0);
    const finished = task.job?.lastFinishedAt;
    if (task.lastOutcome === "succeeded" && finished) {
      lastSuccess.set(task.name, Math.max(finished.getTime(), lastSuccess.get(task.name) ?? 0));
    }
  }
  for (const [task, at] of lastSuccess) metrics.lastSuccess.set({ task }, at / 1000);
}

function seconds(date: Date): number {
  return date.getTime() / 1000;
}

/**
 * The gap between the schedule's next two slots. A task's calendars (docs/calendars.md) leave it
 * as it is: a slot a calendar excludes is still due, and is recorded skipped at its time, so the
 * next run is never overdue across a holiday while an instance runs the task; a gap stretched over
 * the holiday would only make the alert later when none does.
 */
function expectedIntervalSeconds(
  cron: string | null,
  timezone: string | null,
  now: Date,
): number | undefined {
  if (!cron) return undefined;
  try {
    const [first, second] = nextRunTimes(cron, timezone ?? "UTC", now, 2);
    return first && second ? (second.getTime() - first.getTime()) / 1000 : undefined;
  } catch {
    return undefined; // a row edited by hand with a cron we cannot read: no gauge rather than a failed scrape
  }
}

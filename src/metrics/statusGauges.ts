import type { Calendar } from "../core/policies/calendar.js";
import { type ExpectedRun, expectedRun } from "../core/policies/expectedRun.js";
import type { TaskStatus } from "../status/statusModel.js";
import type { MetricSet } from "./definitions.js";

/**
 * Sets the per-task gauges from one `scheduler.status()` (the database's view, shared by every
 * instance): enabled, next run, consecutive failures, and the last success (the later of the
 * database's and this instance's events). Creates the per-task counters the alert rules watch
 * at 0 for every task that has none yet. The task-stopped alert's two gauges honour the task's
 * calendars, `calendarsOf` (src/core/policies/expectedRun.ts).
 */
export function setStatusGauges(
  metrics: MetricSet,
  tasks: readonly TaskStatus[],
  lastSuccessSeen: ReadonlyMap<string, number>,
  now: Date = new Date(),
  calendarsOf: (task: TaskStatus) => readonly Calendar[] = () => [],
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
      const expected = expectedFigures(task, task.job.nextRunAt, now, calendarsOf);
      metrics.nextRunOverdue.set(labels, expected.overdueSeconds);
      if (expected.intervalSeconds !== undefined)
        metrics.expectedInterval.set(labels, expected.intervalSeconds);
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

/** The task-stopped alert's figures; a row edited by hand with a schedule we cannot read: no interval, the raw overdue, rather than a failed scrape. */
function expectedFigures(
  task: TaskStatus,
  nextRunAt: Date,
  now: Date,
  calendarsOf: (task: TaskStatus) => readonly Calendar[],
): ExpectedRun {
  const overdueSeconds = Math.max(0, (now.getTime() - nextRunAt.getTime()) / 1000);
  const schedule = task.job?.cron;
  if (!schedule) return { overdueSeconds, intervalSeconds: undefined };
  try {
    const exclude = task.job?.exclude?.length ? calendarsOf(task) : [];
    return expectedRun(schedule, task.job?.timezone ?? "UTC", nextRunAt.getTime(), now.getTime(), exclude);
  } catch {
    return { overdueSeconds, intervalSeconds: undefined };
  }
}

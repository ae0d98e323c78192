import { type Calendar, exclusionAt } from "./calendar.js";
import { nextSlots } from "./schedule.js";

/**
 * What the task-stopped alert compares (deploy/prometheus/cronwarden-alerts.yml,
 * `CronwardenTaskStopped`): how long ago the task's next run was due, and its expected interval,
 * both honouring its calendars (docs/calendars.md). Pure: the schedule, the next run and `now`
 * are arguments, times in ms.
 *
 * A slot a calendar excludes is not a run that is due: when the job row's next run is such a slot
 * (the engine has not recorded its skip, because a run hangs or no instance claims the task), the
 * run that is due is the first slot after it that the calendars leave in, so a task stalled over a
 * holiday raises no alert until its first run after the holiday is overdue. Without calendars both
 * figures are the schedule's own, as before.
 */
export interface ExpectedRun {
  /** Seconds since the run that is due was due (0 while it is ahead, or while no run is due within 3 years). */
  overdueSeconds: number;
  /** Seconds between the next two slots that will run after `now`; undefined: fewer than two (a one-shot). */
  intervalSeconds: number | undefined;
}

/**
 * `schedule`: the job row's stored schedule (cron, `every` interval or `at` time); `nextRunAt`: the
 * row's next run. Throws on a schedule that cannot be read (the caller leaves the gauges out).
 */
export function expectedRun(
  schedule: string,
  timezone: string,
  nextRunAt: number,
  now: number,
  exclude: readonly Calendar[] = [],
): ExpectedRun {
  const due =
    exclusionAt(exclude, nextRunAt, timezone) === undefined
      ? nextRunAt
      : nextSlots(schedule, timezone, nextRunAt, 1, exclude)[0];
  const [first, second] = nextSlots(schedule, timezone, now, 2, exclude);
  return {
    overdueSeconds: due === undefined ? 0 : Math.max(0, (now - due) / 1000),
    intervalSeconds: first !== undefined && second !== undefined ? (second - first) / 1000 : undefined,
  };
}

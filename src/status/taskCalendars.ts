import type { DesiredState } from "../config/desiredState.js";
import type { Calendar } from "../core/policies/calendar.js";
import type { TaskStatus } from "./statusModel.js";

/**
 * The calendars a task's job row names (the config entry's while it has no row), as the config in
 * force defines them: the reconciler stored that definition in the row (docs/calendars.md). Read
 * by the next runs of `GET /tasks/:name` and by the task-stopped alert's gauges
 * (src/metrics/statusGauges.ts). The definitions are collected once per call of `calendarLookup`,
 * so that a scrape of many tasks reads the config once.
 */
export function calendarLookup(desired: DesiredState | undefined): (task: TaskStatus) => Calendar[] {
  const defined = new Map(
    (desired?.tasks ?? [])
      .flatMap((entry) => entry.exclude ?? [])
      .map((calendar) => [calendar.name, calendar]),
  );
  return (task) => {
    const names = task.job?.exclude ?? task.configured?.exclude ?? [];
    return names.flatMap((name) => defined.get(name) ?? []);
  };
}

/** The calendars of one task (see calendarLookup). */
export function calendarsNamed(task: TaskStatus, desired: DesiredState | undefined): Calendar[] {
  if ((task.job?.exclude ?? task.configured?.exclude ?? []).length === 0) return [];
  return calendarLookup(desired)(task);
}

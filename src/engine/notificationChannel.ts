import { PostgresNotificationChannel } from "@agendajs/postgres-backend";
import type { JobId, JobNotification, JobStateNotification } from "agenda";

/** `source` of the notifications this process gives itself (see wakeLocally). */
export const LOCAL_WAKE_SOURCE = "cronwarden:local-wake";

/**
 * Agenda's PostgreSQL LISTEN/NOTIFY channel, with two changes:
 * - no job-state broadcast: Agenda publishes `start`, `success`/`fail` and `complete` of every
 *   run to all processes (three NOTIFY statements per run) for remote event listeners; cronwarden
 *   reports runs through its own events and the run log, so nobody listens;
 * - `wakeLocally`: hands this process's Agenda a job notification without a NOTIFY, so that it
 *   tries to lock a due job of that name now rather than at its next poll.
 * The job notifications themselves (a job saved, a run requested) are kept: they wake the workers
 * of every instance.
 */
export class JobNotificationChannel extends PostgresNotificationChannel {
  override async publishState(_notification: JobStateNotification): Promise<void> {}

  wakeLocally(jobName: string): Promise<void> {
    const now = new Date();
    const notification: JobNotification = {
      jobId: "" as JobId,
      jobName,
      nextRunAt: now,
      priority: 0,
      timestamp: now,
      source: LOCAL_WAKE_SOURCE,
    };
    return this.notifyHandlers(notification);
  }
}

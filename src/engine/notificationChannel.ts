import { PostgresNotificationChannel } from "@agendajs/postgres-backend";

/**
 * Agenda's PostgreSQL LISTEN/NOTIFY channel without the job-state broadcast: Agenda publishes
 * `start`, `success`/`fail` and `complete` of every run to all processes (three NOTIFY statements
 * per run) for remote event listeners; cronwarden reports runs through its own events and the run
 * log, so nobody listens. The job notifications themselves (a job saved, a run requested) are
 * kept: they make the claim loop of every instance look for due jobs (src/engine/claimLoop.ts).
 */
export class JobNotificationChannel extends PostgresNotificationChannel {
  constructor(...options: ConstructorParameters<typeof PostgresNotificationChannel>) {
    super(...options);
    // Agenda builds and sends a state notification only when the channel has `publishState`
    // (Agenda.publishJobStateNotification): without it, a run costs no notification object either
    Object.defineProperty(this, "publishState", { value: undefined });
  }
}

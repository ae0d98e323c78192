/**
 * The alerting extension point: an `AlertChannel` delivers an `Alert` somewhere (a webhook, a
 * pager, a chat). The `Alerter` decides what is worth an alert and when; channels only deliver.
 */

/** What an alert is about. */
export type AlertEvent =
  /** A run failed and will not be retried (its retries, if any, are used up). */
  | "run:failed"
  /** A run hit its task's timeoutMs. */
  | "run:timed-out"
  /** A running job's lock could not be kept; another instance may take the job over. */
  | "run:lock-lost"
  /** A timed-out handler ignored its signal past the grace period; its lock was released. */
  | "run:abandoned"
  /** An enabled task's slot passed without a run starting. */
  | "missed-slot"
  /** A task paused itself after its pauseOnFailure failed slots in a row (once per pause). */
  | "task:paused"
  /** A config entry was refused; the task keeps its previous state. */
  | "config:rejected"
  /** The config source could not be read or parsed; the last valid snapshot stays in force. */
  | "config:error";

/** Every AlertEvent, once (the type-check fails when one is missing or unknown). */
const EVERY_EVENT = {
  "run:failed": true,
  "run:timed-out": true,
  "run:lock-lost": true,
  "run:abandoned": true,
  "missed-slot": true,
  "task:paused": true,
  "config:rejected": true,
  "config:error": true,
} satisfies Record<AlertEvent, true>;

/** Every AlertEvent, for the metrics' series created at 0. */
export const ALERT_EVENTS = Object.keys(EVERY_EVENT) as readonly AlertEvent[];

export type AlertSeverity = "critical" | "error" | "warning";

export interface Alert {
  event: AlertEvent;
  /** The task concerned; null for alerts about the config source as a whole. */
  task: string | null;
  severity: AlertSeverity;
  /** One line, readable on its own (chat messages, pager titles). */
  summary: string;
  /** JSON-safe facts: slot, attempt, error message, duration, reason, suppressed count... */
  details: Record<string, string | number | boolean | null>;
  /** When the alert was raised. */
  at: Date;
  /** The instance that raised it. */
  instanceId: string;
}

export interface AlertChannel {
  /** Names the channel in logs and metrics (`channel` label). Must not contain secrets. */
  readonly name: string;
  /** Delivers one alert; rejects when it could not. The Alerter bounds the time it waits. */
  send(alert: Alert): Promise<void>;
}

/** Told of each delivery's result (the metrics count them). */
export interface AlertDeliveryObserver {
  /**
   * Told the channels' names once, when the Alerter is created: the metrics create their series
   * at 0, so that the first failed delivery is an increase Prometheus sees.
   */
  channels?(names: readonly string[]): void;
  delivered(channel: string, event: AlertEvent): void;
  failed(channel: string, event: AlertEvent, error: Error): void;
}

import { CronwardenError } from "../core/errors.js";
import { type Logger, toError } from "../core/logger.js";
import { redactSecrets } from "../observability/redact.js";
import { type SchedulerEventSource, Subscriptions } from "../scheduler/eventSubscriptions.js";
import type { Scheduler } from "../scheduler/scheduler.js";
import type { Alert, AlertChannel, AlertDeliveryObserver } from "./alert.js";
import {
  abandonedAlert,
  configErrorAlert,
  configRejectedAlert,
  lockLostAlert,
  missedSlotAlert,
  runFailureAlert,
  taskPausedAlert,
} from "./alertsFromEvents.js";
import { Silencer } from "./silencer.js";

/** What the Alerter uses of a Scheduler: its events and its instance id. */
export type AlertingScheduler = SchedulerEventSource & Pick<Scheduler, "instanceId">;

export interface AlerterOptions {
  scheduler: AlertingScheduler;
  channels: AlertChannel[];
  logger: Logger;
  /** One alert per (task, event) per this window; later ones are counted into the next. Default 15 min. */
  silenceMs?: number;
  /** The Alerter stops waiting for a channel's send() after this long and counts it failed. Default 10 s. */
  sendTimeoutMs?: number;
  /** Told of each delivery's result: pass `metrics.alerts`. */
  observer?: AlertDeliveryObserver;
  now?: () => Date;
}

export const DEFAULT_SILENCE_MS = 15 * 60_000;
const DEFAULT_SEND_TIMEOUT_MS = 10_000;

/**
 * Turns scheduler events into alerts and hands them to the channels: a run that failed for good
 * (after its retries) or timed out, a lost lock, an abandoned handler, a missed slot, a task that
 * paused itself (pause on failure, never silenced: once per pause), a refused
 * config entry, an unreadable config source. Sending is detached from the event (it never delays
 * or breaks a run), bounded in time, and its failures are logged and counted, never thrown.
 */
export class Alerter {
  readonly #channels: AlertChannel[];
  readonly #logger: Logger;
  readonly #silencer: Silencer;
  readonly #sendTimeoutMs: number;
  readonly #observer: AlertDeliveryObserver | undefined;
  readonly #now: () => Date;
  readonly #instanceId: string;
  readonly #subscriptions: Subscriptions;
  readonly #inFlight = new Set<Promise<void>>();
  #stopped = false;

  constructor(options: AlerterOptions) {
    const silenceMs = options.silenceMs ?? DEFAULT_SILENCE_MS;
    const sendTimeoutMs = options.sendTimeoutMs ?? DEFAULT_SEND_TIMEOUT_MS;
    if (!Number.isInteger(silenceMs) || silenceMs < 0)
      throw new CronwardenError(
        "INVALID_SETTINGS",
        `silenceMs must be a whole number >= 0, got ${silenceMs}`,
      );
    if (!Number.isInteger(sendTimeoutMs) || sendTimeoutMs < 1)
      throw new CronwardenError(
        "INVALID_SETTINGS",
        `sendTimeoutMs must be a whole number >= 1, got ${sendTimeoutMs}`,
      );
    const names = options.channels.map((channel) => channel.name);
    const duplicate = names.find((name, index) => names.indexOf(name) !== index);
    if (duplicate !== undefined)
      throw new CronwardenError(
        "INVALID_SETTINGS",
        `two alert channels are named "${duplicate}"; names must be unique`,
      );
    this.#channels = [...options.channels];
    this.#logger = options.logger.child({ component: "alerter" });
    this.#silencer = new Silencer(silenceMs);
    this.#sendTimeoutMs = sendTimeoutMs;
    this.#observer = options.observer;
    try {
      this.#observer?.channels?.(names);
    } catch (error) {
      this.#logger.debug({ err: error }, "alert delivery observer failed");
    }
    this.#now = options.now ?? (() => new Date());
    this.#instanceId = options.scheduler.instanceId;
    this.#subscriptions = new Subscriptions(options.scheduler, (event, error) =>
      this.#logger.warn({ err: error, event }, `alerter: the ${event} listener failed`),
    );
    this.#subscribe();
  }

  /**
   * Sends an alert through the silence window to every channel, detached: returns at once.
   * The scheduler's events call this; an application may raise its own alerts with it too.
   */
  raise(alert: Alert): void {
    if (this.#stopped) return;
    const key = `${alert.task ?? "-"}|${alert.event}`;
    // a pause happens once and stays until resumed: each one is worth its alert, however close
    const admission =
      alert.event === "task:paused"
        ? { send: true, suppressed: 0 }
        : this.#silencer.admit(key, alert.at.getTime());
    if (!admission.send) {
      this.#logger.debug({ event: alert.event, task: alert.task }, "alert silenced (sent recently)");
      return;
    }
    const toSend = redactAlert(
      admission.suppressed > 0
        ? { ...alert, details: { ...alert.details, suppressed: admission.suppressed } }
        : alert,
    );
    for (const channel of this.#channels) this.#track(this.#deliver(channel, toSend));
  }

  /** Waits (up to `timeoutMs`) for sends in progress; for shutdown and tests. */
  async flush(timeoutMs = this.#sendTimeoutMs): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    const deadline = new Promise<void>((resolve) => {
      timer = setTimeout(resolve, timeoutMs);
    });
    await Promise.race([Promise.allSettled([...this.#inFlight]), deadline]);
    clearTimeout(timer);
  }

  /** Stops listening to the scheduler; sends in progress go on (see flush()). Idempotent. */
  stop(): void {
    this.#stopped = true;
    this.#subscriptions.close();
  }

  #subscribe(): void {
    const events = this.#subscriptions;
    const origin = () => ({ instanceId: this.#instanceId, at: this.#now() });
    events.on("run:finished", (event) => {
      if (event.outcome !== "failed") return;
      const alert = runFailureAlert(event, origin());
      if (!alert) return;
      // A timeout (a hung handler) is worth an alert even when it is retried; another failure
      // only once final, after the task's retries.
      if (alert.event === "run:timed-out" || event.final) this.raise(alert);
    });
    events.on("run:lock-lost", (event) => this.raise(lockLostAlert(event, origin())));
    events.on("run:abandoned", (event) => this.raise(abandonedAlert(event, origin())));
    events.on("missed-slot", (event) => this.raise(missedSlotAlert(event, origin())));
    events.on("task:paused", (event) => this.raise(taskPausedAlert(event, origin())));
    events.on("config:rejected", (event) => this.raise(configRejectedAlert(event, origin())));
    events.on("config:error", (event) => this.raise(configErrorAlert(event, origin())));
  }

  /** One channel, one alert: never throws, never waits longer than sendTimeoutMs. */
  async #deliver(channel: AlertChannel, alert: Alert): Promise<void> {
    // leave the scheduler's emit first: a channel's synchronous part runs outside the run's path
    await new Promise<void>((resolve) => setImmediate(resolve));
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(
        () => reject(new Error(`no answer within ${this.#sendTimeoutMs} ms`)),
        this.#sendTimeoutMs,
      );
      timer.unref();
    });
    let failure: Error | undefined;
    try {
      await Promise.race([Promise.resolve().then(() => channel.send(alert)), timeout]);
    } catch (thrown) {
      failure = toError(thrown);
    } finally {
      clearTimeout(timer);
    }
    try {
      if (failure) this.#observer?.failed(channel.name, alert.event, failure);
      else this.#observer?.delivered(channel.name, alert.event);
    } catch (error) {
      this.#logger.debug({ err: error }, "alert delivery observer failed");
    }
    if (!failure) {
      this.#logger.debug({ channel: channel.name, event: alert.event, task: alert.task }, "alert sent");
      return;
    }
    this.#logger.warn(
      { channel: channel.name, event: alert.event, task: alert.task, err: failure },
      `alert ${alert.event}${alert.task ? ` for task "${alert.task}"` : ""} could not be sent through ${channel.name}: ${failure.message}`,
    );
  }

  #track(delivery: Promise<void>): void {
    this.#inFlight.add(delivery);
    void delivery.finally(() => this.#inFlight.delete(delivery));
  }
}

function redactAlert(alert: Alert): Alert {
  const details: Alert["details"] = {};
  for (const [key, value] of Object.entries(alert.details)) {
    details[key] = typeof value === "string" ? redactSecrets(value) : value;
  }
  return { ...alert, summary: redactSecrets(alert.summary), details };
}

import type { Registry } from "prom-client";
import { ALERT_EVENTS, type AlertDeliveryObserver } from "../alerts/alert.js";
import type { Logger } from "../core/logger.js";
import { type SchedulerEventSource, Subscriptions } from "../scheduler/eventSubscriptions.js";
import type { Scheduler } from "../scheduler/scheduler.js";
import { calendarLookup } from "../status/taskCalendars.js";
import { packageVersion } from "../version.js";
import { defineMetrics } from "./definitions.js";
import { EventFeed } from "./eventFeed.js";
import { promClient } from "./promClient.js";
import { setStatusGauges } from "./statusGauges.js";

/** What the metrics read of a Scheduler: its events, and status() at scrape time. */
export type MetricsScheduler = SchedulerEventSource &
  Pick<Scheduler, "status"> &
  Partial<Pick<Scheduler, "readiness" | "desiredState">>;

export interface MetricsOptions {
  /** Where a failing status() read at scrape time is reported (at warn, once per failure streak). */
  logger?: Logger;
  /** prom-client's default process and Node.js metrics (CPU, memory, event loop, GC) on this registry; default true. */
  defaultMetrics?: boolean;
}

export interface Metrics {
  /** cronwarden's own registry (not prom-client's global one): merge it into yours if you like. */
  readonly registry: Registry;
  /** The Content-Type of `render()`'s text. */
  readonly contentType: string;
  /** The Prometheus text exposition of every metric. */
  render(): Promise<string>;
  /** Feeds the alert counters; pass it to the Alerter as `observer`. */
  readonly alerts: AlertDeliveryObserver;
  /** Stops listening to the scheduler. */
  stop(): void;
}

/**
 * Prometheus metrics fed by the scheduler's events, plus per-task gauges read from
 * `scheduler.status()` when scraped.
 */
export function createMetrics(scheduler: MetricsScheduler, options: MetricsOptions = {}): Metrics {
  const logger = options.logger?.child({ component: "metrics" });
  const prom = promClient();
  const registry = new prom.Registry();
  let inFlight: Promise<void> | undefined;
  let failing = false;
  const refreshStatus = () => {
    inFlight ??= Promise.all([scheduler.status(), scheduler.readiness?.()])
      .then(([tasks, readiness]) => {
        if (readiness) metrics.ready.set(readiness.ready ? 1 : 0);
        const calendars = calendarLookup(scheduler.desiredState?.());
        setStatusGauges(metrics, tasks, feed.lastSuccessAt, new Date(), calendars);
        failing = false;
      })
      .catch((error: unknown) => {
        // keep the previous values; the scrape itself still succeeds
        if (!failing)
          logger?.warn({ err: error }, "metrics: cannot read the task status; per-task gauges are stale");
        failing = true;
      })
      .finally(() => {
        inFlight = undefined;
      });
    return inFlight;
  };
  const metrics = defineMetrics(registry, refreshStatus);
  const feed = new EventFeed(metrics);
  metrics.buildInfo.set({ version: packageVersion(), node_version: process.version }, 1);
  if (options.defaultMetrics !== false) prom.collectDefaultMetrics({ register: registry });
  const subscriptions = new Subscriptions(scheduler, (event, error) =>
    logger?.warn({ err: error, event }, `metrics: the ${event} listener failed`),
  );
  feed.attach(subscriptions);
  return {
    registry,
    contentType: registry.contentType,
    render: () => registry.metrics(),
    alerts: {
      channels: (names) => {
        for (const channel of names) {
          for (const event of ALERT_EVENTS) {
            metrics.alertsSent.inc({ channel, event }, 0);
            metrics.alertsFailed.inc({ channel, event }, 0);
          }
        }
      },
      delivered: (channel, event) => metrics.alertsSent.inc({ channel, event }),
      failed: (channel, event) => metrics.alertsFailed.inc({ channel, event }),
    },
    stop: () => subscriptions.close(),
  };
}

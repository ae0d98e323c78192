import type { Registry } from "prom-client";
import { promClient } from "./promClient.js";

/**
 * Every metric cronwarden exports, on the registry it is given. Names follow the Prometheus
 * conventions: `cronwarden_` prefix, base units (seconds), `_total` for counters.
 */
export function defineMetrics(registry: Registry, refreshStatus: () => Promise<void>) {
  const { Counter, Gauge, Histogram } = promClient();
  const registers = [registry];
  // Gauges read from scheduler.status() at scrape time; one status() call serves them all.
  const collect = () => refreshStatus();
  return {
    runs: new Counter({
      name: "cronwarden_runs_total",
      help: "Finished runs (attempts) of a task on this instance, by outcome (succeeded, failed, interrupted: cut off at shutdown and handed off).",
      labelNames: ["task", "outcome"] as const,
      registers,
    }),
    runDuration: new Histogram({
      name: "cronwarden_run_duration_seconds",
      help: "How long a run's handler took, from its start to its end, on this instance.",
      labelNames: ["task", "outcome"] as const,
      buckets: [0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 1800, 3600],
      registers,
    }),
    shards: new Counter({
      name: "cronwarden_shards_total",
      help: "Shards of sharded tasks that ended on this instance, by outcome (docs/sharding.md).",
      labelNames: ["task", "outcome"] as const,
      registers,
    }),
    shardedSlotDuration: new Histogram({
      name: "cronwarden_sharded_slot_duration_seconds",
      help: "A sharded slot's duration, from its first shard's start to its reduce's end (or its last shard's), by the instance that coordinated it.",
      labelNames: ["task", "outcome"] as const,
      buckets: [0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 1800, 3600, 7200],
      registers,
    }),
    startLateness: new Histogram({
      name: "cronwarden_run_start_lateness_seconds",
      help: "How late a run's first attempt started after its slot (startedAt - scheduledAt).",
      labelNames: ["task"] as const,
      buckets: [0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300],
      registers,
    }),
    pauses: new Counter({
      name: "cronwarden_task_pauses_total",
      help: "Times a task paused itself after its pauseOnFailure failed slots in a row (counted by the instance whose save paused it).",
      labelNames: ["task"] as const,
      registers,
    }),
    runsInProgress: new Gauge({
      name: "cronwarden_runs_in_progress",
      help: "Runs whose handler is running on this instance now.",
      labelNames: ["task"] as const,
      registers,
    }),
    retries: new Counter({
      name: "cronwarden_run_retries_total",
      help: "Failed attempts that the task's retry policy retries.",
      labelNames: ["task"] as const,
      registers,
    }),
    lastSuccess: new Gauge({
      name: "cronwarden_task_last_success_timestamp_seconds",
      help: "When the task's last successful run finished (unix seconds), on any instance.",
      labelNames: ["task"] as const,
      collect,
      registers,
    }),
    nextRun: new Gauge({
      name: "cronwarden_task_next_run_timestamp_seconds",
      help: "When the task is scheduled to run next (unix seconds); absent while it is disabled.",
      labelNames: ["task"] as const,
      collect,
      registers,
    }),
    enabled: new Gauge({
      name: "cronwarden_task_enabled",
      help: "1 when the task's job is enabled, 0 when disabled.",
      labelNames: ["task"] as const,
      collect,
      registers,
    }),
    consecutiveFailures: new Gauge({
      name: "cronwarden_task_consecutive_failures",
      help: "Failed slots in a row, from the run log (a slot counts once, by its final attempt after retries; reset by a succeeded slot).",
      labelNames: ["task"] as const,
      collect,
      registers,
    }),
    nextRunOverdue: new Gauge({
      name: "cronwarden_task_next_run_overdue_seconds",
      help: "How long ago the enabled task's next run was due without starting (0 while on time); a slot its calendars exclude is not a run that is due: counted from the first slot after it they leave in. With cronwarden_task_expected_interval_seconds it finds a task that stopped running. Read from the database: every instance reports the same value, aggregate with max by (task).",
      labelNames: ["task"] as const,
      collect,
      registers,
    }),
    expectedInterval: new Gauge({
      name: "cronwarden_task_expected_interval_seconds",
      help: "The gap between the enabled task's next two slots that will run (its schedule's period around now, leaving out the slots its calendars exclude).",
      labelNames: ["task"] as const,
      collect,
      registers,
    }),
    dependencyWaits: new Counter({
      name: "cronwarden_dependency_waits_total",
      help: "Slots a downstream task started waiting for its upstreams (docs/dependencies.md), counted by the instance that opened the wait.",
      labelNames: ["task"] as const,
      registers,
    }),
    dependencyRuns: new Counter({
      name: "cronwarden_dependency_runs_queued_total",
      help: "Slots whose upstreams settled so that the downstream's run was queued, counted by the instance that claimed the decision.",
      labelNames: ["task"] as const,
      registers,
    }),
    dependencySkips: new Counter({
      name: "cronwarden_dependency_skips_total",
      help: "Slots a downstream task was recorded skipped for, by reason (upstream_failed, upstream_skipped, upstream_disabled, upstream_not_done, no_upstream_failed, dependency_removed), counted by the instance that claimed the decision.",
      labelNames: ["task", "reason"] as const,
      registers,
    }),
    missedSlots: new Counter({
      name: "cronwarden_missed_slots_total",
      help: "Slots of an enabled task that passed without a run starting.",
      labelNames: ["task"] as const,
      registers,
    }),
    skippedSlots: new Counter({
      name: "cronwarden_skipped_slots_total",
      help: "Slots of a task skipped by a policy (catchUp, overlap); each also has a skipped run record.",
      labelNames: ["task", "policy"] as const,
      registers,
    }),
    reconciles: new Counter({
      name: "cronwarden_reconciles_total",
      help: "Reconcile passes by trigger (config, stored, anti-entropy) and result (changed, unchanged, failed).",
      labelNames: ["trigger", "result"] as const,
      registers,
    }),
    configReloads: new Counter({
      name: "cronwarden_config_reloads_total",
      help: "Config versions read from the source, by result (loaded, error).",
      labelNames: ["result"] as const,
      registers,
    }),
    configRejected: new Counter({
      name: "cronwarden_config_rejected_entries_total",
      help: "Config entries refused (invalid field, unknown task); the task keeps its previous state.",
      registers,
    }),
    configRejectedNow: new Gauge({
      name: "cronwarden_config_entries_rejected",
      help: "Config entries refused in the config this instance last reconciled (invalid field, unknown task, ...); 0 once they are fixed or removed.",
      registers,
    }),
    lockRenewals: new Counter({
      name: "cronwarden_lock_renewals_total",
      help: "Lock renewals of running jobs by this instance's watchdog.",
      labelNames: ["task"] as const,
      registers,
    }),
    eventLoopStalls: new Histogram({
      name: "cronwarden_event_loop_stall_seconds",
      help: "Stalls of this instance's event loop (synchronous work on the main thread) of at least the stall threshold, by length.",
      buckets: [1, 2, 5, 10, 30, 60, 300],
      registers,
    }),
    lockLosses: new Counter({
      name: "cronwarden_lock_losses_total",
      help: "Runs that lost their lock (another instance could take the job over).",
      labelNames: ["task"] as const,
      registers,
    }),
    abandoned: new Counter({
      name: "cronwarden_runs_abandoned_total",
      help: "Timed-out handlers that ignored their signal past the grace period; their lock was released.",
      labelNames: ["task"] as const,
      registers,
    }),
    alertsSent: new Counter({
      name: "cronwarden_alerts_sent_total",
      help: "Alerts delivered, by channel and event.",
      labelNames: ["channel", "event"] as const,
      registers,
    }),
    alertsFailed: new Counter({
      name: "cronwarden_alerts_failed_total",
      help: "Alerts that could not be delivered (error or timeout), by channel and event.",
      labelNames: ["channel", "event"] as const,
      registers,
    }),
    buildInfo: new Gauge({
      name: "cronwarden_build_info",
      help: "Always 1; its labels name the cronwarden and Node.js versions of this instance.",
      labelNames: ["version", "node_version"] as const,
      registers,
    }),
    configSourceUp: new Gauge({
      name: "cronwarden_config_source_up",
      help: "1 when this instance's last read of its config source succeeded, 0 while it is unreadable or malformed.",
      registers,
    }),
    ready: new Gauge({
      name: "cronwarden_ready",
      help: "1 when this instance is ready (database reachable, desired state loaded, workers started), as /readyz.",
      collect,
      registers,
    }),
  };
}

export type MetricSet = ReturnType<typeof defineMetrics>;

/**
 * Scheduler setting defaults, declared once: the settings schema (src/scheduler/settings.ts)
 * fills them in, and the engine falls back to the same values when it is built without them.
 * The cron minimum interval and the fleet guard's share live with their rules
 * (src/config/cronValidator.ts, src/config/fleetGuard.ts).
 */
export const SCHEDULER_DEFAULTS = {
  namespace: "default",
  runLogRetentionDays: 30,
  runLogKeepPerTask: 0,
  runLogPartitionHours: 24,
  antiEntropyMs: 60_000,
  defaultTimezone: "UTC",
  lockLifetimeMs: 15_000,
  /** Agenda's own default. */
  maxConcurrency: 20,
  timeoutGraceMs: 30_000,
  missedSlotGraceMs: 60_000,
  missedSlotCheckMs: 15_000,
  healthProbeMs: 2_000,
  livenessCheckMs: 2_000,
  /** An event-loop stall this long is logged and counted: longer than a GC pause, short enough to name a blocking handler. */
  stallWarnMs: 2_000,
  migrate: true,
  drainTimeoutMs: 30_000,
} as const;

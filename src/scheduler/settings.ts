import { z } from "zod";
import { DEFAULT_MIN_INTERVAL_MS, formatMs, isValidTimezone } from "../config/cronValidator.js";
import { DEFAULT_MAX_DISABLE_SHARE } from "../config/fleetGuard.js";
import { SCHEDULER_DEFAULTS } from "../core/defaults.js";
import { CronwardenError } from "../core/errors.js";

/**
 * Agenda's own default poll interval; lowered to half the minimum interval when that is shorter.
 * A poll equal to a schedule's interval can leave every slot late by up to one poll: the poll that
 * starts a late slot cannot also lock the next one ahead.
 */
const AGENDA_DEFAULT_PROCESS_EVERY_MS = 5_000;

export const schedulerSettingsSchema = z
  .object({
    instanceId: z.string().min(1).max(200).optional(),
    /** One deployment reads one namespace (dev, staging, prod); it keys the stored state and audit trail. */
    namespace: z
      .string()
      .regex(/^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$/, "use letters, digits, '.', '_' or '-'")
      .default(SCHEDULER_DEFAULTS.namespace),
    /** Run-log rows (agenda_logs) older than this many days are deleted, hourly; 0 keeps them forever. */
    runLogRetentionDays: z.number().min(0).default(SCHEDULER_DEFAULTS.runLogRetentionDays),
    /** Each task's records beyond its latest this many are deleted, hourly; 0 keeps any number. */
    runLogKeepPerTask: z.number().int().min(0).default(SCHEDULER_DEFAULTS.runLogKeepPerTask),
    /** The run log's partitions are this many hours wide (a day by default); retention drops whole partitions. */
    runLogPartitionHours: z.number().int().min(1).max(744).default(SCHEDULER_DEFAULTS.runLogPartitionHours),
    /** A full reconcile this often repairs drift; 0 turns it off. */
    antiEntropyMs: z.number().int().min(0).default(SCHEDULER_DEFAULTS.antiEntropyMs),
    defaultTimezone: z
      .string()
      .refine(isValidTimezone, "is not an IANA timezone name")
      .default(SCHEDULER_DEFAULTS.defaultTimezone),
    /** Schedules firing more often than this are refused (default: one minute). */
    minIntervalMs: z.number().int().min(1000).default(DEFAULT_MIN_INTERVAL_MS),
    /** How often Agenda looks for due runs; must not exceed minIntervalMs or runs are skipped. */
    processEveryMs: z.number().int().min(100).optional(),
    /**
     * A lock not renewed for this long is taken over by another instance. Running handlers renew
     * theirs every third of it, so this bounds failover after a crash, not the length of a run.
     */
    lockLifetimeMs: z.number().int().min(1000).default(SCHEDULER_DEFAULTS.lockLifetimeMs),
    /** Runs in progress at once on this instance, all tasks together; due runs beyond it wait. */
    maxConcurrency: z.number().int().min(1).max(10_000).default(SCHEDULER_DEFAULTS.maxConcurrency),
    /** After a task's timeout, how long a handler that ignores its signal keeps the lock. */
    timeoutGraceMs: z.number().int().min(0).default(SCHEDULER_DEFAULTS.timeoutGraceMs),
    /** An enabled task whose slot is this far past without a run starting is reported missed (at least 2 polls). */
    missedSlotGraceMs: z.number().int().min(0).default(SCHEDULER_DEFAULTS.missedSlotGraceMs),
    /** How often the missed-slot check runs; 0 turns it off. */
    missedSlotCheckMs: z.number().int().min(0).default(SCHEDULER_DEFAULTS.missedSlotCheckMs),
    /** How often PostgreSQL is probed, for the outage and recovery log lines. */
    healthProbeMs: z.number().int().min(100).default(SCHEDULER_DEFAULTS.healthProbeMs),
    /**
     * How often each instance checks the others' liveness locks; a crashed instance's runs are
     * re-run after about two checks. 0 turns liveness off (crashes are then recovered after the
     * lock lifetime).
     */
    livenessCheckMs: z.number().int().min(0).default(SCHEDULER_DEFAULTS.livenessCheckMs),
    /**
     * An event-loop stall at least this long (a handler's synchronous work on the main thread) is
     * logged once with its length and counted (cronwarden_event_loop_stall_seconds). 0 turns it off.
     */
    stallWarnMs: z.number().int().min(0).default(SCHEDULER_DEFAULTS.stallWarnMs),
    /**
     * true: create or upgrade the database schema at start-up when it is not current (needs DDL
     * rights). false: never change it; start() fails with SCHEMA_NOT_CURRENT, naming `cronwarden
     * migrate`, unless the schema is current.
     */
    migrate: z.boolean().default(SCHEDULER_DEFAULTS.migrate),
    /** How long stop() waits for running handlers. */
    drainTimeoutMs: z.number().int().min(0).default(SCHEDULER_DEFAULTS.drainTimeoutMs),
    /**
     * A config snapshot that leaves out more than this share of the enabled tasks (or all of them)
     * is refused unless it says confirmDisableAll: true (src/config/fleetGuard.ts); 1 keeps only
     * the all-tasks rule.
     */
    maxDisableShare: z.number().min(0).max(1).default(DEFAULT_MAX_DISABLE_SHARE),
  })
  .transform((settings, context) => {
    const processEveryMs =
      settings.processEveryMs ??
      Math.min(AGENDA_DEFAULT_PROCESS_EVERY_MS, Math.floor(settings.minIntervalMs / 2));
    if (processEveryMs > settings.minIntervalMs) {
      context.addIssue({
        code: "custom",
        path: ["processEveryMs"],
        message: `${formatMs(processEveryMs)} exceeds minIntervalMs ${formatMs(settings.minIntervalMs)}: the claim loop polls less often than the shortest interval, so a slot could start up to a poll late; lower processEveryMs or raise minIntervalMs`,
      });
    }
    return { ...settings, processEveryMs };
  });

/**
 * The fewest connections a scheduler's pool may have. One stays checked out for the job
 * notifications (LISTEN), and a reconcile holds one for its lock while its statements take
 * another (AgendaEngine.withReconcileLock): with two, the first reconcile after the start waited
 * for a connection forever, and every run with it.
 */
export const MIN_POOL_MAX = 3;

/** Refuses a pool too small to run in (MIN_POOL_MAX); pg's default of 10 passes. */
export function checkPoolSize(max: unknown): void {
  if (typeof max !== "number" || max >= MIN_POOL_MAX) return;
  throw new CronwardenError(
    "INVALID_SETTINGS",
    `invalid scheduler settings: pool: max is ${max}; the scheduler keeps one connection for its job notifications and a reconcile holds one for its lock while its statements take another, so give the pool at least ${MIN_POOL_MAX} connections (pg's default is 10)`,
  );
}

export type SchedulerSettingsInput = z.input<typeof schedulerSettingsSchema>;
export type SchedulerSettings = z.output<typeof schedulerSettingsSchema>;

export function parseSchedulerSettings(input: SchedulerSettingsInput): SchedulerSettings {
  const result = schedulerSettingsSchema.safeParse(input);
  if (result.success) return result.data;
  const problems = result.error.issues.map(
    (issue) => `${issue.path.join(".") || "settings"}: ${issue.message}`,
  );
  throw new CronwardenError("INVALID_SETTINGS", `invalid scheduler settings: ${problems.join("; ")}`);
}

/** The settings the engine takes as they are (src/engine/engineApi.ts EngineOptions). */
export function engineSettings(settings: SchedulerSettings & { instanceId: string }) {
  return {
    instanceId: settings.instanceId,
    processEveryMs: settings.processEveryMs,
    lockLifetimeMs: settings.lockLifetimeMs,
    maxConcurrency: settings.maxConcurrency,
    timeoutGraceMs: settings.timeoutGraceMs,
    healthProbeMs: settings.healthProbeMs,
    missedSlotGraceMs: settings.missedSlotGraceMs,
    missedSlotCheckMs: settings.missedSlotCheckMs,
    livenessCheckMs: settings.livenessCheckMs,
    stallWarnMs: settings.stallWarnMs,
    migrate: settings.migrate,
    namespace: settings.namespace,
    runLogPartitionHours: settings.runLogPartitionHours,
  };
}

import { z } from "zod";

/**
 * The admin API's answers as the CLI reads them (dates stay ISO strings). The objects are loose:
 * the fields the CLI does not read (a task's `state`, a run's `id`, ...) are kept, so that `--json`
 * prints all that the API gave.
 */

const isoDate = z.string();

export const taskStatusSchema = z.looseObject({
  name: z.string(),
  registered: z.boolean(),
  configured: z.looseObject({ enabled: z.boolean(), cron: z.string(), timezone: z.string() }).nullable(),
  job: z
    .looseObject({
      enabled: z.boolean(),
      cron: z.string().nullable(),
      timezone: z.string().nullable(),
      nextRunAt: isoDate.nullable(),
      lastRunAt: isoDate.nullable(),
      lastFinishedAt: isoDate.nullable(),
      pausedByFailure: z
        .looseObject({
          at: isoDate,
          failures: z.number(),
          slot: isoDate.nullable(),
          lastError: z.string().nullable(),
        })
        .optional(),
    })
    .nullable(),
  /** enabled, disabled, paused (by failure) or no-job; what ENABLED shows in the table. */
  state: z.string().optional(),
  running: z.boolean(),
  runningOn: z.string().nullable(),
  lastOutcome: z.enum(["succeeded", "failed", "skipped", "interrupted", "lock-lost"]).nullable(),
  lastError: z.string().nullable(),
  consecutiveFailures: z.number(),
  consecutiveFailedAttempts: z.number().optional(),
  missedSlot: z
    .looseObject({ scheduledAt: isoDate.nullable(), detectedAt: isoDate, reason: z.string() })
    .nullable()
    .optional(),
});

export type TaskStatusJson = z.output<typeof taskStatusSchema>;

export const runRecordSchema = z.looseObject({
  /** For GET /runs/:id (the run detail). */
  id: z.string().optional(),
  outcome: z.string(),
  scheduledAt: isoDate,
  startedAt: isoDate.nullable(),
  finishedAt: isoDate,
  durationMs: z.number().nullable(),
  error: z.string().nullable(),
  detail: z.string().nullable(),
  instanceId: z.string().nullable(),
  attempt: z.number().nullable(),
  rerun: z.boolean(),
  trigger: z.string().optional(),
  requestedBy: z.string().nullable().optional(),
});

export const runNowSchema = z.looseObject({
  status: z.literal("queued"),
  task: z.string(),
  requestedAt: isoDate,
  requestedBy: z.string().optional(),
  withDownstream: z.boolean().optional(),
});

export const resumeSchema = z.looseObject({
  status: z.literal("resumed"),
  task: z.string(),
  resumedBy: z.string(),
  nextRunAt: isoDate.nullable(),
  pausedByFailure: z.looseObject({ at: isoDate, failures: z.number() }),
});

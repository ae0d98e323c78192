import { z } from "zod";

/** The admin API's answers as the CLI reads them (dates stay ISO strings). */

const isoDate = z.string();

export const taskStatusSchema = z.object({
  name: z.string(),
  registered: z.boolean(),
  configured: z.object({ enabled: z.boolean(), cron: z.string(), timezone: z.string() }).nullable(),
  job: z
    .object({
      enabled: z.boolean(),
      cron: z.string().nullable(),
      timezone: z.string().nullable(),
      nextRunAt: isoDate.nullable(),
      lastRunAt: isoDate.nullable(),
      lastFinishedAt: isoDate.nullable(),
      pausedByFailure: z
        .object({
          at: isoDate,
          failures: z.number(),
          slot: isoDate.nullable(),
          lastError: z.string().nullable(),
        })
        .optional(),
    })
    .nullable(),
  running: z.boolean(),
  runningOn: z.string().nullable(),
  lastOutcome: z.enum(["succeeded", "failed", "skipped", "interrupted"]).nullable(),
  lastError: z.string().nullable(),
  consecutiveFailures: z.number(),
  consecutiveFailedAttempts: z.number().optional(),
  missedSlot: z
    .object({ scheduledAt: isoDate.nullable(), detectedAt: isoDate, reason: z.string() })
    .nullable()
    .optional(),
});

export type TaskStatusJson = z.output<typeof taskStatusSchema>;

export const runRecordSchema = z.object({
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

export const runNowSchema = z.object({
  status: z.literal("queued"),
  task: z.string(),
  requestedAt: isoDate,
  requestedBy: z.string().optional(),
  withDownstream: z.boolean().optional(),
});

export const resumeSchema = z.object({
  status: z.literal("resumed"),
  task: z.string(),
  resumedBy: z.string(),
  nextRunAt: isoDate.nullable(),
  pausedByFailure: z.object({ at: isoDate, failures: z.number() }),
});

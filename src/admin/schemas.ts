import { z } from "zod";
import { TASK_NAME_PATTERN } from "../core/taskName.js";
import { HttpError } from "./httpErrors.js";

export const MAX_RUNS_LIMIT = 500;
export const DEFAULT_RUNS_LIMIT = 20;

export const taskParams = z.object({
  name: z
    .string()
    .regex(
      TASK_NAME_PATTERN,
      "task name must be 1-200 letters, digits, '.', '_', '-' or ':', starting with a letter or digit",
    ),
});

/** An ISO 8601 date-time query parameter. */
export function isoDate(name: string) {
  return z
    .string()
    .refine(
      (text) =>
        /^\d{4}-\d{2}-\d{2}(T[\d:.]+(Z|[+-]\d{2}:?\d{2})?)?$/.test(text) && !Number.isNaN(Date.parse(text)),
      `${name} must be an ISO 8601 date, e.g. 2030-01-31T12:00:00Z`,
    )
    .transform((text) => new Date(text));
}

export const runsQuery = z
  .object({
    cursor: z.string().max(2_000).optional(),
    outcome: z
      .string()
      .transform((text) => text.split(",").filter((value) => value.length > 0))
      .pipe(
        z.array(
          z.enum(["succeeded", "failed", "skipped", "interrupted", "lock-lost"], {
            error:
              "outcome must be succeeded, failed, skipped, interrupted or lock-lost (several separated by commas)",
          }),
        ),
      )
      .optional(),
    trigger: z.enum(["schedule", "manual"], { error: "trigger must be schedule or manual" }).optional(),
    from: isoDate("from").optional(),
    to: isoDate("to").optional(),
    limit: z
      .string()
      .regex(/^\d+$/, `limit must be a whole number from 1 to ${MAX_RUNS_LIMIT}`)
      .transform(Number)
      .pipe(
        z
          .number()
          .int()
          .min(1, `limit must be a whole number from 1 to ${MAX_RUNS_LIMIT}`)
          .max(MAX_RUNS_LIMIT, `limit must be a whole number from 1 to ${MAX_RUNS_LIMIT}`),
      )
      .default(DEFAULT_RUNS_LIMIT),
  })
  .strict();

/** POST /tasks/:name/run takes no options: no body, null, or an empty object. */
export const runNowBody = z.union([z.undefined(), z.null(), z.object({}).strict()]);

/** POST /tasks/:name/run?withDownstream=true: the downstreams follow the manual run (docs/dependencies.md). */
export const runNowQuery = z
  .object({
    withDownstream: z
      .enum(["true", "false"], { error: "withDownstream must be true or false" })
      .transform((text) => text === "true")
      .optional(),
  })
  .strict();

/** GET /chains: the recent slots of one task's chain (or of every chain), newest first. */
export const chainsQuery = z
  .object({
    task: taskParams.shape.name.optional(),
    limit: z
      .string()
      .regex(/^\d+$/, "limit must be a whole number from 1 to 500")
      .transform(Number)
      .pipe(
        z
          .number()
          .int()
          .min(1, "limit must be a whole number from 1 to 500")
          .max(500, "limit must be a whole number from 1 to 500"),
      )
      .default(50),
  })
  .strict();

/** Parses `input` or answers 400 with the first problem, naming where it is. */
export function parseOr400<T extends z.ZodType>(schema: T, input: unknown, where: string): z.output<T> {
  const result = schema.safeParse(input);
  if (result.success) return result.data;
  const issue = result.error.issues[0];
  const path = issue?.path.length ? `${where}.${issue.path.join(".")}` : where;
  const message =
    issue?.code === "unrecognized_keys"
      ? `unexpected ${issue.keys.map((key) => `"${key}"`).join(", ")}`
      : issue?.message;
  throw new HttpError(400, `invalid ${path}: ${message ?? "invalid input"}`);
}

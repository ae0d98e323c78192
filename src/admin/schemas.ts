import { z } from "zod";
import { TASK_NAME_PATTERN } from "../scheduler/taskRegistry.js";
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

export const runsQuery = z
  .object({
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

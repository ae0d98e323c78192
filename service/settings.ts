import path from "node:path";
import { fileURLToPath } from "node:url";
import { z } from "zod";
import { type AdminToken, CronwardenError, loadTokenFile, parseTokenList } from "../src/index.js";

const serviceRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");

const optionalInt = (min: number) =>
  z
    .string()
    .regex(/^\d+$/, "must be a whole number")
    .transform(Number)
    .pipe(z.number().int().min(min))
    .optional();

/** The reference service's settings: environment variables, each documented in the README. */
const environmentSchema = z.object({
  DATABASE_URL: z.string().url("must be a postgres:// URL").optional(),
  CRONWARDEN_DATA_DIR: z.string().min(1).default(".data"),
  CRONWARDEN_EMBEDDED_PG_PORT: optionalInt(1).refine((port) => port !== 5432, "must not be 5432"),
  CRONWARDEN_CONFIG_FILE: z
    .string()
    .min(1)
    .default(path.join(serviceRoot, "config", "tasks.yaml")),
  CRONWARDEN_TIMEZONE: z.string().optional(),
  CRONWARDEN_MIN_INTERVAL_MS: optionalInt(1000),
  CRONWARDEN_PROCESS_EVERY_MS: optionalInt(100),
  CRONWARDEN_LOCK_LIFETIME_MS: optionalInt(1000),
  CRONWARDEN_MAX_CONCURRENCY: optionalInt(1),
  CRONWARDEN_DRAIN_TIMEOUT_MS: optionalInt(0),
  CRONWARDEN_TIMEOUT_GRACE_MS: optionalInt(0),
  CRONWARDEN_HEALTH_PROBE_MS: optionalInt(100),
  CRONWARDEN_NAMESPACE: z.string().min(1).optional(),
  CRONWARDEN_ANTI_ENTROPY_MS: optionalInt(0),
  CRONWARDEN_MAX_DISABLE_SHARE: z
    .string()
    .regex(/^(0(\.\d+)?|1(\.0+)?)$/, "must be a number from 0 to 1 (a share of the enabled tasks)")
    .transform(Number)
    .optional(),
  CRONWARDEN_RUN_LOG_RETENTION_DAYS: optionalInt(0),
  CRONWARDEN_INSTANCE_ID: z.string().min(1).optional(),
  CRONWARDEN_PG_POOL_MAX: optionalInt(2),
  CRONWARDEN_ADMIN_ENABLED: z
    .enum(["true", "false", "1", "0"], { message: "must be true or false" })
    .default("true")
    .transform((value) => value === "true" || value === "1"),
  CRONWARDEN_ADMIN_HOST: z.string().min(1).default("127.0.0.1"),
  CRONWARDEN_ADMIN_PORT: optionalInt(0).refine(
    (port) => port === undefined || port <= 65535,
    "must be at most 65535",
  ),
  CRONWARDEN_ADMIN_TOKEN: z.string().min(16, "must be at least 16 characters").optional(),
  CRONWARDEN_TOKENS: z.string().optional(),
  CRONWARDEN_TOKENS_FILE: z.string().min(1).optional(),
  CRONWARDEN_MIGRATE: z
    .enum(["true", "false", "1", "0"], { message: "must be true or false" })
    .default("true")
    .transform((value) => value === "true" || value === "1"),
  CRONWARDEN_ALERT_WEBHOOK_URL: z
    .string()
    .url("must be an http:// or https:// URL")
    .refine((url) => /^https?:\/\//i.test(url), "must be an http:// or https:// URL")
    .optional(),
  CRONWARDEN_ALERT_WEBHOOK_FORMAT: z.enum(["json", "slack"]).default("json"),
  CRONWARDEN_ALERT_SILENCE_MS: optionalInt(0),
});

/** Values never echoed back in an error message. */
const SECRET_VARIABLES = new Set([
  "DATABASE_URL",
  "CRONWARDEN_ADMIN_TOKEN",
  "CRONWARDEN_TOKENS",
  "CRONWARDEN_ALERT_WEBHOOK_URL",
]);

export type ServiceSettings = z.output<typeof environmentSchema> & {
  /** CRONWARDEN_TOKENS and the tokens of CRONWARDEN_TOKENS_FILE, validated. */
  adminTokens: AdminToken[];
};

export function loadServiceSettings(environment: NodeJS.ProcessEnv = process.env): ServiceSettings {
  const blankAsUnset = Object.fromEntries(Object.entries(environment).filter(([, value]) => value !== ""));
  const result = environmentSchema.safeParse(blankAsUnset);
  if (result.success) {
    const { CRONWARDEN_TOKENS: list, CRONWARDEN_TOKENS_FILE: file } = result.data;
    const adminTokens = [
      ...(list === undefined ? [] : parseTokenList(list)),
      ...(file === undefined ? [] : loadTokenFile(file)),
    ];
    return { ...result.data, adminTokens };
  }
  const problems = result.error.issues.map((issue) => {
    const name = String(issue.path[0]);
    const value = SECRET_VARIABLES.has(name) ? "(hidden)" : JSON.stringify(environment[name]);
    return `${name}=${value}: ${issue.message}`;
  });
  throw new CronwardenError("INVALID_SETTINGS", `invalid environment: ${problems.join("; ")}`);
}

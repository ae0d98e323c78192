import { z } from "zod";
import { type AdminToken, loadTokenFile, parseTokenList } from "../admin/tokens.js";
import { CronwardenError } from "../core/errors.js";
import { MIN_POOL_MAX } from "../scheduler/settings.js";

const optionalInt = (min: number) =>
  z
    .string()
    .regex(/^\d+$/, "must be a whole number")
    .transform(Number)
    .pipe(z.number().int().min(min, `must be at least ${min}`))
    .optional();

/** pino's levels; anything else made pino throw its own stack at start-up. */
export const LOG_LEVELS = ["fatal", "error", "warn", "info", "debug", "trace", "silent"] as const;

function isTimezone(name: string): boolean {
  try {
    new Intl.DateTimeFormat("en-US", { timeZone: name });
    return true;
  } catch {
    return false;
  }
}

/** The service's settings: environment variables, each documented in the README. */
const environmentSchema = z.object({
  DATABASE_URL: z
    .string()
    .url("must be a postgres:// URL")
    .refine((url) => /^postgres(ql)?:\/\//i.test(url), "must be a postgres:// URL")
    .optional(),
  LOG_LEVEL: z.enum(LOG_LEVELS, { message: `must be one of ${LOG_LEVELS.join(", ")}` }).default("info"),
  CRONWARDEN_DATA_DIR: z.string().min(1).default(".data"),
  CRONWARDEN_EMBEDDED_PG_PORT: optionalInt(1).refine((port) => port !== 5432, "must not be 5432"),
  CRONWARDEN_CONFIG_FILE: z.string().min(1).optional(),
  CRONWARDEN_TASKS_MODULE: z.string().min(1).optional(),
  CRONWARDEN_TIMEZONE: z
    .string()
    .refine(isTimezone, "must be an IANA timezone name such as UTC or Europe/Paris")
    .optional(),
  CRONWARDEN_MIN_INTERVAL_MS: optionalInt(1000),
  CRONWARDEN_PROCESS_EVERY_MS: optionalInt(100),
  CRONWARDEN_LOCK_LIFETIME_MS: optionalInt(1000),
  CRONWARDEN_MAX_CONCURRENCY: optionalInt(1),
  CRONWARDEN_DRAIN_TIMEOUT_MS: optionalInt(0),
  CRONWARDEN_TIMEOUT_GRACE_MS: optionalInt(0),
  CRONWARDEN_HEALTH_PROBE_MS: optionalInt(100),
  CRONWARDEN_STALL_WARN_MS: optionalInt(0),
  CRONWARDEN_LIVENESS_CHECK_MS: optionalInt(0),
  CRONWARDEN_NAMESPACE: z.string().min(1).optional(),
  CRONWARDEN_ANTI_ENTROPY_MS: optionalInt(0),
  CRONWARDEN_MAX_DISABLE_SHARE: z
    .string()
    .regex(/^(0(\.\d+)?|1(\.0+)?)$/, "must be a number from 0 to 1 (a share of the enabled tasks)")
    .transform(Number)
    .optional(),
  CRONWARDEN_RUN_LOG_RETENTION_DAYS: optionalInt(0),
  CRONWARDEN_RUN_LOG_KEEP_PER_TASK: optionalInt(0),
  CRONWARDEN_RUN_LOG_PARTITION_HOURS: optionalInt(1),
  CRONWARDEN_INSTANCE_ID: z.string().min(1).optional(),
  CRONWARDEN_PG_POOL_MAX: optionalInt(MIN_POOL_MAX),
  CRONWARDEN_PG_IDLE_TIMEOUT_MS: optionalInt(0).transform((value) => value ?? 300_000),
  CRONWARDEN_DB_STARTUP_TIMEOUT_MS: optionalInt(0).transform((value) => value ?? 300_000),
  CRONWARDEN_EVENT_LOOP_STALL_MS: optionalInt(100).transform((value) => value ?? 10_000),
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
  // the read-only metrics listener (src/metrics/metricsServer.ts): off unless a port is set
  CRONWARDEN_METRICS_HOST: z.string().min(1).default("127.0.0.1"),
  CRONWARDEN_METRICS_PORT: optionalInt(0).refine(
    (port) => port === undefined || port <= 65535,
    "must be at most 65535",
  ),
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
  CRONWARDEN_ALERT_WEBHOOK_FORMAT: z
    .enum(["json", "slack"], { message: "must be json or slack" })
    .default("json"),
  CRONWARDEN_ALERT_SILENCE_MS: optionalInt(0),
});

/** Values never echoed back in an error message. */
const SECRET_VARIABLES = new Set([
  "DATABASE_URL",
  "CRONWARDEN_ADMIN_TOKEN",
  "CRONWARDEN_TOKENS",
  "CRONWARDEN_ALERT_WEBHOOK_URL",
]);

/**
 * CRONWARDEN_* variables read elsewhere (the CLI, the test suite), so not reported as unknown.
 */
const OTHER_KNOWN_VARIABLES = [
  "CRONWARDEN_ADMIN_URL",
  "CRONWARDEN_REQUIRE_ETCD",
  "CRONWARDEN_REQUIRE_CHROMIUM",
  "CRONWARDEN_REQUIRE_PROMETHEUS",
];

/** Every variable the service reads, for docs and for the deployment-manifest checks. */
export const SERVICE_VARIABLES: readonly string[] = Object.keys(environmentSchema.shape);

export type ServiceSettings = z.output<typeof environmentSchema> & {
  /** CRONWARDEN_TOKENS and the tokens of CRONWARDEN_TOKENS_FILE, validated. */
  adminTokens: AdminToken[];
};

/**
 * Reads and checks the service's environment. A bad value throws INVALID_SETTINGS naming every
 * bad variable, its value (hidden for secrets) and the rule; an empty value counts as unset.
 */
export function loadServiceSettings(environment: NodeJS.ProcessEnv = process.env): ServiceSettings {
  const known = new Set<string>(SERVICE_VARIABLES);
  const blankAsUnset = Object.fromEntries(
    Object.entries(environment).filter(([name, value]) => value !== "" && known.has(name)),
  );
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

/**
 * CRONWARDEN_* variables the service does not know (a typo is otherwise silently ignored), each
 * with the closest known name.
 */
export function unknownVariables(
  environment: NodeJS.ProcessEnv = process.env,
): Array<{ name: string; closest: string }> {
  const known = [
    ...SERVICE_VARIABLES.filter((name) => name.startsWith("CRONWARDEN_")),
    ...OTHER_KNOWN_VARIABLES,
  ];
  return Object.keys(environment)
    .filter((name) => name.startsWith("CRONWARDEN_") && !known.includes(name))
    .sort()
    .map((name) => ({
      name,
      closest: known.reduce((best, candidate) =>
        editDistance(name, candidate) < editDistance(name, best) ? candidate : best,
      ),
    }));
}

function editDistance(a: string, b: string): number {
  let previous = Array.from({ length: b.length + 1 }, (_, index) => index);
  for (let i = 1; i <= a.length; i++) {
    const current = [i];
    for (let j = 1; j <= b.length; j++) {
      current[j] = Math.min(
        (previous[j] ?? 0) + 1,
        (current[j - 1] ?? 0) + 1,
        (previous[j - 1] ?? 0) + (a[i - 1] === b[j - 1] ? 0 : 1),
      );
    }
    previous = current;
  }
  return previous[b.length] ?? 0;
}

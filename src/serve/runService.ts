import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import type pg from "pg";
import { backoffDelay } from "../core/backoff.js";
import { CronwardenError } from "../core/errors.js";
import { createLogger, type Logger, toError } from "../core/logger.js";
import type { TaskRegistrar } from "../scheduler/taskDefinition.js";
import {
  connectDatabase,
  createOperations,
  ServiceShutdown,
  schedulerOf,
  watchNpmShell,
} from "./serviceParts.js";
import { LOG_LEVELS, loadServiceSettings, unknownVariables } from "./settings.js";

export interface ServiceOptions {
  /** Step 4 of the start-up: registers every task. */
  registerTasks: (registrar: TaskRegistrar) => void;
  /** Default process.env. */
  environment?: NodeJS.ProcessEnv;
  /** Default: JSON lines on stdout at LOG_LEVEL. */
  logger?: Logger;
  /** The config file; default CRONWARDEN_CONFIG_FILE, else `defaultConfigFile`. */
  configFile?: string;
  /** Used when neither `configFile` nor CRONWARDEN_CONFIG_FILE is given; default ./tasks.yaml. */
  defaultConfigFile?: string;
}

/**
 * Runs the full service until SIGTERM/SIGINT: PostgreSQL (DATABASE_URL or the embedded one), the
 * scheduler on a watched config file, metrics, alerts, the admin API and the dashboard. Start-up
 * follows docs/design.md ("Start-up and shutdown"); shutdown goes in the reverse order: drain the scheduler, end the pool, stop the
 * embedded PostgreSQL, exit. A start-up failure logs one fatal line and exits 1.
 */
export async function runService(options: ServiceOptions): Promise<void> {
  const environment = options.environment ?? process.env;
  const level = (LOG_LEVELS as readonly string[]).includes(environment.LOG_LEVEL ?? "")
    ? environment.LOG_LEVEL
    : "info"; // a bad LOG_LEVEL is reported by loadServiceSettings below, by name
  const logger = options.logger ?? createLogger({ level });
  // installed first, so that a signal during start-up still shuts down in order
  const shutdown = new ServiceShutdown(logger);
  const stopping = shutdown.stopping;
  watchNpmShell(environment, logger, stopping);
  // Last line of defence: a scheduler must not die of a stray promise in a dependency. Tests
  // assert this line never appears; if it does, it names the bug to fix.
  process.on("unhandledRejection", (reason) => {
    logger.error(
      { err: reason },
      "unhandled promise rejection (a cronwarden bug: please report it); the service keeps running",
    );
  });

  try {
    // 1. service settings (a misspelt name would otherwise be ignored silently)
    for (const { name, closest } of unknownVariables(environment)) {
      logger.warn(
        { variable: name, closest },
        `unknown variable ${name} is ignored; did you mean ${closest}?`,
      );
    }
    const settings = loadServiceSettings(environment);

    // 2. PostgreSQL: DATABASE_URL, or an embedded server with its data under CRONWARDEN_DATA_DIR
    const pool = await connectDatabase(settings, logger, shutdown);

    // 3. the scheduler and its TaskRegistry
    const configFile = path.resolve(
      options.configFile ?? settings.CRONWARDEN_CONFIG_FILE ?? options.defaultConfigFile ?? "tasks.yaml",
    );
    const scheduler = schedulerOf(pool, settings, configFile, logger);
    // 3b. operations: metrics, alerts, admin API; created before start() so start-up events count
    const operations = createOperations(scheduler, settings, logger);
    // clean-ups run in reverse: this one after scheduler.stop(), so alerts raised while draining go out
    shutdown.add(() => operations.close());
    shutdown.add(async () => {
      await scheduler.stop();
    });

    // 4. task modules
    options.registerTasks(scheduler);

    // the admin API answers /healthz (and /readyz with 503) during start-up
    await operations.listen();

    // a database still starting (a pod beside its PostgreSQL) is waited for, not a crash loop
    await waitForDatabase(pool, settings.CRONWARDEN_DB_STARTUP_TIMEOUT_MS, logger, stopping.signal);
    if (stopping.signal.aborted) return;

    // 5-9. define handlers, read the desired state, reconcile, start the workers, watch the config
    await scheduler.start();
  } catch (error) {
    if (stopping.signal.aborted) return; // a signal during start-up: the shutdown handler exits
    logger.fatal({ err: error }, `cronwarden could not start: ${(error as Error)?.message ?? String(error)}`);
    await shutdown.cleanUp();
    process.exit(1);
  }
}

/** The start-up wait for the database: 0.5 s doubling to 15 s, not jittered (one instance, one wait). */
const DATABASE_WAIT_BACKOFF = { initialMs: 500, maxMs: 15_000 };

/**
 * Retries `SELECT 1` with exponential backoff (0.5 s doubling to 15 s) until it answers or
 * `timeoutMs` has passed (then throws DATABASE_UNAVAILABLE). Logs the first failure and then every
 * failure whose message changed, with the attempt count.
 */
export async function waitForDatabase(
  pool: pg.Pool,
  timeoutMs: number,
  logger: Logger,
  signal?: AbortSignal,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let attempt = 0;
  let lastMessage: string | undefined;
  for (;;) {
    attempt++;
    try {
      await pool.query("SELECT 1");
      if (attempt > 1) logger.info({ attempt }, "database reachable: starting");
      return;
    } catch (thrown) {
      const message = toError(thrown).message;
      const delay = backoffDelay(attempt, DATABASE_WAIT_BACKOFF);
      const remaining = deadline - Date.now();
      if (remaining <= 0 || signal?.aborted) {
        throw new CronwardenError(
          "DATABASE_UNAVAILABLE",
          `the database is unreachable (${message}) after ${attempt} attempts over ${Math.round(timeoutMs / 1000)} s; check DATABASE_URL and that PostgreSQL is up, or raise CRONWARDEN_DB_STARTUP_TIMEOUT_MS`,
          { cause: thrown },
        );
      }
      if (message !== lastMessage) {
        logger.warn(
          { attempt, retryInMs: delay, giveUpInMs: remaining },
          `database unreachable at start-up (${message}); retrying with backoff for up to ${Math.round(remaining / 1000)} s more (not ready meanwhile)`,
        );
        lastMessage = message;
      }
      await sleep(Math.min(delay, remaining), undefined, { signal }).catch(() => {});
    }
  }
}

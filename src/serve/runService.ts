import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import pg from "pg";
import { createAdminServer } from "../admin/index.js";
import { Alerter, WebhookAlertChannel } from "../alerts/index.js";
import { backoffDelay } from "../core/backoff.js";
import { CronwardenError } from "../core/errors.js";
import { createLogger, type Logger, toError } from "../core/logger.js";
import { startEmbeddedPostgres } from "../infra/embeddedPostgres/index.js";
import { createMetrics, createMetricsServer } from "../metrics/index.js";
import { createScheduler } from "../scheduler/scheduler.js";
import { handleShutdownSignals } from "../scheduler/shutdown.js";
import type { TaskRegistrar } from "../scheduler/taskDefinition.js";
import { FileConfigSource } from "../sources/fileSource.js";
import { endPool } from "./endPool.js";
import { shellUnderNpm, watchParent } from "./launcher.js";
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
  const cleanups: Array<() => Promise<void>> = [];
  // one clean-up, however many ask: a signal during a failed start's clean-up awaits the same one
  // (and so the same drain) instead of finding the list empty and exiting at once
  let cleaning: Promise<void> | undefined;
  const cleanUp = () => {
    cleaning ??= (async () => {
      for (const cleanup of cleanups.splice(0).reverse()) {
        await cleanup().catch((error: unknown) => logger.error({ err: error }, "clean-up step failed"));
      }
    })();
    return cleaning;
  };
  /** What must not outlive the process even when it exits at once (a second signal). */
  const atOnce: Array<() => void> = [];
  const stopping = new AbortController();
  // installed first, so that a signal during start-up still shuts down in order
  handleShutdownSignals({
    logger,
    shutdown: async () => {
      stopping.abort();
      await cleanUp();
    },
    beforeExitAtOnce: () => {
      for (const step of atOnce) step();
    },
  });
  // npx / npm exec / an npm script without exec: npm's signal stops the shell in between, not this
  // process (src/serve/launcher.ts). Say so at start, and shut down as on SIGTERM once the shell is gone.
  const underNpm = shellUnderNpm(environment);
  if (underNpm) {
    logger.warn(
      {
        launcher: underNpm.launcher,
        shellPid: underNpm.shellPid,
        shell: underNpm.shell,
        npmPid: underNpm.npmPid,
      },
      `started by ${underNpm.launcher} through a shell (${underNpm.shell}, pid ${underNpm.shellPid}): a SIGTERM sent to npm stops that shell, not this process, and npm exits without waiting for the drain; this process shuts down when the shell is gone. As a service's entry point (container CMD, systemd, a supervisor) run node on the bin, node node_modules/cronwarden/bin/cronwarden.mjs serve ..., or an npm script that starts with exec ("exec cronwarden serve ..."): docs/operations.md, "Signals"`,
    );
    const stopWatching = watchParent(underNpm.shellPid, () => {
      if (stopping.signal.aborted) return;
      logger.warn(
        { shellPid: underNpm.shellPid, npmPid: underNpm.npmPid },
        `the shell npm started this process through (pid ${underNpm.shellPid}) is gone (npm was sent a signal, or ended): shutting down as on SIGTERM`,
      );
      process.kill(process.pid, "SIGTERM");
    });
    stopping.signal.addEventListener("abort", stopWatching, { once: true });
  }
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
    let connectionString = settings.DATABASE_URL;
    if (!connectionString) {
      const embedded = await startEmbeddedPostgres({
        dataDir: path.resolve(settings.CRONWARDEN_DATA_DIR, "postgres"),
        port: settings.CRONWARDEN_EMBEDDED_PG_PORT,
        logger: logger.child({ component: "embedded-postgres" }),
      });
      cleanups.push(() => embedded.stop());
      atOnce.push(() => embedded.stopWithoutWaiting());
      connectionString = embedded.connectionString;
    }
    const pool = new pg.Pool({
      connectionString,
      max: settings.CRONWARDEN_PG_POOL_MAX ?? 10,
      // pg's default (10 s) closes the connections a minute task used between its slots: the
      // statements at each slot would open and authenticate new ones, at the slot
      idleTimeoutMillis: settings.CRONWARDEN_PG_IDLE_TIMEOUT_MS,
    });
    cleanups.push(() => endPool(pool, logger));

    // 3. the scheduler and its TaskRegistry
    const configFile = path.resolve(
      options.configFile ?? settings.CRONWARDEN_CONFIG_FILE ?? options.defaultConfigFile ?? "tasks.yaml",
    );
    const scheduler = createScheduler({
      pool,
      config: new FileConfigSource({ path: configFile }),
      logger,
      instanceId: settings.CRONWARDEN_INSTANCE_ID,
      defaultTimezone: settings.CRONWARDEN_TIMEZONE,
      minIntervalMs: settings.CRONWARDEN_MIN_INTERVAL_MS,
      processEveryMs: settings.CRONWARDEN_PROCESS_EVERY_MS,
      lockLifetimeMs: settings.CRONWARDEN_LOCK_LIFETIME_MS,
      maxConcurrency: settings.CRONWARDEN_MAX_CONCURRENCY,
      drainTimeoutMs: settings.CRONWARDEN_DRAIN_TIMEOUT_MS,
      timeoutGraceMs: settings.CRONWARDEN_TIMEOUT_GRACE_MS,
      healthProbeMs: settings.CRONWARDEN_HEALTH_PROBE_MS,
      livenessCheckMs: settings.CRONWARDEN_LIVENESS_CHECK_MS,
      namespace: settings.CRONWARDEN_NAMESPACE,
      antiEntropyMs: settings.CRONWARDEN_ANTI_ENTROPY_MS,
      maxDisableShare: settings.CRONWARDEN_MAX_DISABLE_SHARE,
      runLogRetentionDays: settings.CRONWARDEN_RUN_LOG_RETENTION_DAYS,
      runLogKeepPerTask: settings.CRONWARDEN_RUN_LOG_KEEP_PER_TASK,
      migrate: settings.CRONWARDEN_MIGRATE,
    });
    // 3b. operations: metrics, alerts, admin API; created before start() so start-up events count
    const metrics = createMetrics(scheduler, { logger });
    const alerter = settings.CRONWARDEN_ALERT_WEBHOOK_URL
      ? new Alerter({
          scheduler,
          channels: [
            new WebhookAlertChannel({
              url: settings.CRONWARDEN_ALERT_WEBHOOK_URL,
              format: settings.CRONWARDEN_ALERT_WEBHOOK_FORMAT,
            }),
          ],
          silenceMs: settings.CRONWARDEN_ALERT_SILENCE_MS,
          logger,
          observer: metrics.alerts,
        })
      : undefined;
    // refuses (INVALID_SETTINGS) to listen beyond loopback without a token: the start fails with that message
    const admin = settings.CRONWARDEN_ADMIN_ENABLED
      ? createAdminServer({
          scheduler,
          metrics,
          host: settings.CRONWARDEN_ADMIN_HOST,
          port: settings.CRONWARDEN_ADMIN_PORT,
          token: settings.CRONWARDEN_ADMIN_TOKEN,
          tokens: settings.adminTokens,
          eventLoopStallMs: settings.CRONWARDEN_EVENT_LOOP_STALL_MS,
          logger,
        })
      : undefined;
    // GET /metrics without a token on its own port, for Prometheus (docs/deployment.md)
    const metricsListener =
      settings.CRONWARDEN_METRICS_PORT === undefined
        ? undefined
        : createMetricsServer({
            metrics,
            host: settings.CRONWARDEN_METRICS_HOST,
            port: settings.CRONWARDEN_METRICS_PORT,
            logger,
          });
    // clean-ups run in reverse: this one after scheduler.stop(), so alerts raised while draining go out
    cleanups.push(async () => {
      await alerter?.flush(5_000);
      alerter?.stop();
      metrics.stop();
      await metricsListener?.close();
      await admin?.close();
    });
    cleanups.push(async () => {
      await scheduler.stop();
    });

    // 4. task modules
    options.registerTasks(scheduler);

    // the admin API answers /healthz (and /readyz with 503) during start-up
    await admin?.listen();
    await metricsListener?.listen();

    // a database still starting (a pod beside its PostgreSQL) is waited for, not a crash loop
    await waitForDatabase(pool, settings.CRONWARDEN_DB_STARTUP_TIMEOUT_MS, logger, stopping.signal);
    if (stopping.signal.aborted) return;

    // 5-9. define handlers, read the desired state, reconcile, start the workers, watch the config
    await scheduler.start();
  } catch (error) {
    if (stopping.signal.aborted) return; // a signal during start-up: the shutdown handler exits
    logger.fatal({ err: error }, `cronwarden could not start: ${(error as Error)?.message ?? String(error)}`);
    await cleanUp();
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

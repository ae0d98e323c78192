import path from "node:path";
import pg from "pg";
import { createAdminServer } from "../admin/index.js";
import { Alerter, WebhookAlertChannel } from "../alerts/index.js";
import type { Logger } from "../core/logger.js";
import { startEmbeddedPostgres } from "../infra/embeddedPostgres/index.js";
import { createMetrics, createMetricsServer } from "../metrics/index.js";
import { createScheduler, type Scheduler } from "../scheduler/scheduler.js";
import { handleShutdownSignals } from "../scheduler/shutdown.js";
import { FileConfigSource } from "../sources/fileSource.js";
import { endPool } from "./endPool.js";
import { shellUnderNpm, watchParent } from "./launcher.js";
import type { ServiceSettings } from "./settings.js";

/**
 * The parts of the reference service that runService (src/serve/runService.ts) puts together in
 * its start-up order: the shutdown path, the database, the scheduler, and the operations around
 * it (metrics, alerts, the admin API).
 */

/**
 * The service's shutdown on SIGTERM/SIGINT, installed before anything starts: the clean-ups run
 * in the reverse order of their adding, once, however many ask (a signal during a failed start's
 * clean-up awaits the same one, and so the same drain, instead of exiting at once).
 */
export class ServiceShutdown {
  /** Aborts when a signal asks for the shutdown. */
  readonly stopping = new AbortController();
  readonly #logger: Logger;
  readonly #cleanups: Array<() => Promise<void>> = [];
  /** What must not outlive the process even when it exits at once (a second signal). */
  readonly #atOnce: Array<() => void> = [];
  #cleaning: Promise<void> | undefined;

  constructor(logger: Logger) {
    this.#logger = logger;
    handleShutdownSignals({
      logger,
      shutdown: async () => {
        this.stopping.abort();
        await this.cleanUp();
      },
      beforeExitAtOnce: () => {
        for (const step of this.#atOnce) step();
      },
    });
  }

  /** A clean-up step; `atOnce`, if given, is what it must do even on an exit at once. */
  add(cleanup: () => Promise<void>, atOnce?: () => void): void {
    this.#cleanups.push(cleanup);
    if (atOnce) this.#atOnce.push(atOnce);
  }

  cleanUp(): Promise<void> {
    this.#cleaning ??= (async () => {
      for (const cleanup of this.#cleanups.splice(0).reverse()) {
        await cleanup().catch((error: unknown) => this.#logger.error({ err: error }, "clean-up step failed"));
      }
    })();
    return this.#cleaning;
  }
}

/**
 * npx / npm exec / an npm script without exec: npm's signal stops the shell in between, not this
 * process (src/serve/launcher.ts). Says so at start, and shuts down as on SIGTERM once the shell is gone.
 */
export function watchNpmShell(
  environment: NodeJS.ProcessEnv,
  logger: Logger,
  stopping: AbortController,
): void {
  const underNpm = shellUnderNpm(environment);
  if (!underNpm) return;
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

/** DATABASE_URL, or an embedded server with its data under CRONWARDEN_DATA_DIR; a pool on it, ended at shutdown. */
export async function connectDatabase(
  settings: ServiceSettings,
  logger: Logger,
  shutdown: ServiceShutdown,
): Promise<pg.Pool> {
  let connectionString = settings.DATABASE_URL;
  if (!connectionString) {
    const embedded = await startEmbeddedPostgres({
      dataDir: path.resolve(settings.CRONWARDEN_DATA_DIR, "postgres"),
      port: settings.CRONWARDEN_EMBEDDED_PG_PORT,
      logger: logger.child({ component: "embedded-postgres" }),
    });
    shutdown.add(
      () => embedded.stop(),
      () => embedded.stopWithoutWaiting(),
    );
    connectionString = embedded.connectionString;
  }
  const pool = new pg.Pool({
    connectionString,
    max: settings.CRONWARDEN_PG_POOL_MAX ?? 10,
    // pg's default (10 s) closes the connections a minute task used between its slots: the
    // statements at each slot would open and authenticate new ones, at the slot
    idleTimeoutMillis: settings.CRONWARDEN_PG_IDLE_TIMEOUT_MS,
  });
  shutdown.add(() => endPool(pool, logger));
  return pool;
}

/** The scheduler on the watched config file, with the service's settings. */
export function schedulerOf(
  pool: pg.Pool,
  settings: ServiceSettings,
  configFile: string,
  logger: Logger,
): Scheduler {
  return createScheduler({
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
    stallWarnMs: settings.CRONWARDEN_STALL_WARN_MS,
    namespace: settings.CRONWARDEN_NAMESPACE,
    antiEntropyMs: settings.CRONWARDEN_ANTI_ENTROPY_MS,
    maxDisableShare: settings.CRONWARDEN_MAX_DISABLE_SHARE,
    runLogRetentionDays: settings.CRONWARDEN_RUN_LOG_RETENTION_DAYS,
    runLogKeepPerTask: settings.CRONWARDEN_RUN_LOG_KEEP_PER_TASK,
    runLogPartitionHours: settings.CRONWARDEN_RUN_LOG_PARTITION_HOURS,
    migrate: settings.CRONWARDEN_MIGRATE,
  });
}

/**
 * Metrics, alerts (with a webhook URL), the admin API (unless disabled; it refuses, with
 * INVALID_SETTINGS, to listen beyond loopback without a token) and the metrics port for
 * Prometheus (docs/deployment.md). listen() before the scheduler's start, so that /healthz
 * answers and /readyz says 503 during it; close() after its stop, so alerts raised while
 * draining go out.
 */
export function createOperations(
  scheduler: Scheduler,
  settings: ServiceSettings,
  logger: Logger,
): { listen(): Promise<void>; close(): Promise<void> } {
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
  const metricsListener =
    settings.CRONWARDEN_METRICS_PORT === undefined
      ? undefined
      : createMetricsServer({
          metrics,
          host: settings.CRONWARDEN_METRICS_HOST,
          port: settings.CRONWARDEN_METRICS_PORT,
          logger,
        });
  return {
    listen: async () => {
      await admin?.listen();
      await metricsListener?.listen();
    },
    close: async () => {
      await alerter?.flush(5_000);
      alerter?.stop();
      metrics.stop();
      await metricsListener?.close();
      await admin?.close();
    },
  };
}

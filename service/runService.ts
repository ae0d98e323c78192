import path from "node:path";
import pg from "pg";
import {
  Alerter,
  createAdminServer,
  createLogger,
  createMetrics,
  createScheduler,
  FileConfigSource,
  handleShutdownSignals,
  type Logger,
  type TaskRegistrar,
  WebhookAlertChannel,
} from "../src/index.js";
import { startEmbeddedPostgres } from "../src/infra/embeddedPostgres/index.js";
import { loadServiceSettings } from "./settings.js";

export interface ServiceOptions {
  /** Step 4 of the start-up: registers every task module. */
  registerTasks: (scheduler: TaskRegistrar) => void;
  environment?: NodeJS.ProcessEnv;
  logger?: Logger;
}

/**
 * Runs the service until SIGTERM/SIGINT. Start-up follows SPEC §5; shutdown goes in the reverse
 * order: drain the scheduler, end the pool, stop the embedded PostgreSQL, exit.
 */
export async function runService(options: ServiceOptions): Promise<void> {
  const logger = options.logger ?? createLogger();
  const cleanups: Array<() => Promise<void>> = [];
  const cleanUp = async () => {
    for (const cleanup of cleanups.splice(0).reverse()) {
      await cleanup().catch((error: unknown) => logger.error({ err: error }, "clean-up step failed"));
    }
  };
  // installed first, so that a signal during start-up still shuts down in order
  handleShutdownSignals({ logger, shutdown: cleanUp });
  // Last line of defence: a scheduler must not die of a stray promise in a dependency. Tests
  // assert this line never appears; if it does, it names the bug to fix.
  process.on("unhandledRejection", (reason) => {
    logger.error(
      { err: reason },
      "unhandled promise rejection (a cronwarden bug: please report it); the service keeps running",
    );
  });

  try {
    // 1. service settings
    const settings = loadServiceSettings(options.environment);

    // 2. PostgreSQL: DATABASE_URL, or an embedded server with its data under CRONWARDEN_DATA_DIR
    let connectionString = settings.DATABASE_URL;
    if (!connectionString) {
      const embedded = await startEmbeddedPostgres({
        dataDir: path.resolve(settings.CRONWARDEN_DATA_DIR, "postgres"),
        port: settings.CRONWARDEN_EMBEDDED_PG_PORT,
        logger: logger.child({ component: "embedded-postgres" }),
      });
      cleanups.push(() => embedded.stop());
      connectionString = embedded.connectionString;
    }
    const pool = new pg.Pool({ connectionString, max: settings.CRONWARDEN_PG_POOL_MAX ?? 10 });
    cleanups.push(() => pool.end());

    // 3. the scheduler and its TaskRegistry
    const scheduler = createScheduler({
      pool,
      config: new FileConfigSource({ path: settings.CRONWARDEN_CONFIG_FILE }),
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
      namespace: settings.CRONWARDEN_NAMESPACE,
      antiEntropyMs: settings.CRONWARDEN_ANTI_ENTROPY_MS,
      maxDisableShare: settings.CRONWARDEN_MAX_DISABLE_SHARE,
      runLogRetentionDays: settings.CRONWARDEN_RUN_LOG_RETENTION_DAYS,
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
          logger,
        })
      : undefined;
    // clean-ups run in reverse: this one after scheduler.stop(), so alerts raised while draining go out
    cleanups.push(async () => {
      await alerter?.flush(5_000);
      alerter?.stop();
      metrics.stop();
      await admin?.close();
    });
    cleanups.push(async () => {
      await scheduler.stop();
    });

    // 4. task modules
    options.registerTasks(scheduler);

    // the admin API answers /healthz (and /readyz with 503) during start-up
    await admin?.listen();

    // 5-9. define handlers, read the desired state, reconcile, start the workers, watch the config
    await scheduler.start();
  } catch (error) {
    logger.fatal({ err: error }, `cronwarden could not start: ${(error as Error)?.message ?? String(error)}`);
    await cleanUp();
    process.exit(1);
  }
}

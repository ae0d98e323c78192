/** The implementation behind index.ts, loaded when a server is started or looked up. */

import fs from "node:fs/promises";
import path from "node:path";
import { toError } from "../../core/logger.js";
import { ensureBinariesReachable, resolveBinaries } from "./binaries.js";
import {
  ensureDatabase,
  loadOrInitCluster,
  readCredentials,
  SUPERUSER,
  writeCredentials,
} from "./cluster.js";
import type { ServerContext } from "./commands.js";
import { embeddedPostgresError } from "./errors.js";
import { clusterFiles } from "./files.js";
import type { EmbeddedPostgres, EmbeddedPostgresOptions } from "./index.js";
import { isPortFree, portInUse } from "./ports.js";
import { recoverFromPreviousRun, signalPostmaster } from "./recovery.js";
import { makeStop, prepareSocketDir, startServer } from "./server.js";
import { chooseLaunch, chownTree, isRoot, type Launch, resolveServerUser } from "./serverUser.js";

const DEFAULT_DATABASE = "cronwarden";

export async function startEmbeddedPostgres(options: EmbeddedPostgresOptions): Promise<EmbeddedPostgres> {
  // A logger that already names its component keeps it: pino would otherwise write the key twice.
  const log =
    "component" in options.logger.bindings()
      ? options.logger
      : options.logger.child({ component: "embedded-postgres" });
  const dataDir = path.resolve(options.dataDir);
  const database = options.database ?? DEFAULT_DATABASE;
  validateOptions(options, database);

  // Fail fast, before any initdb, when the requested port is taken.
  if (options.port !== undefined && !(await isPortFree(options.port))) throw portInUse(options.port);

  const files = clusterFiles(dataDir);
  let bins = await resolveBinaries();
  const user = isRoot() ? await resolveServerUser(log) : undefined;

  await fs.mkdir(path.dirname(dataDir), { recursive: true });
  await fs.mkdir(dataDir, { recursive: true, mode: 0o700 });
  let launch: Launch = { kind: "self" };
  if (user) {
    await chownTree(dataDir, user);
    bins = await ensureBinariesReachable(bins, user, log);
    launch = await chooseLaunch(dataDir, user, log);
  }
  const ctx: ServerContext = { bins, launch, files, log };

  const credentials = await loadOrInitCluster(ctx);
  await recoverFromPreviousRun(ctx);
  const socketDir = await prepareSocketDir(ctx);
  const port = await startServer(ctx, socketDir, options.port, credentials.port).catch(
    async (error: unknown) => {
      await fs.rmdir(socketDir).catch(() => {});
      throw error;
    },
  );
  if (credentials.port !== port) await writeCredentials(files, { ...credentials, port });

  const stop = makeStop(ctx, socketDir);
  try {
    await ensureDatabase(port, credentials.password, database);
  } catch (error) {
    await stop().catch((stopError: unknown) =>
      log.warn({ err: toError(stopError) }, "could not stop embedded PostgreSQL after a failed start"),
    );
    throw embeddedPostgresError(
      `embedded PostgreSQL started on 127.0.0.1:${port} but creating database "${database}" failed: ${toError(error).message}\n  log: ${files.logFile}\n  fix: check the log; if the cluster in ${dataDir} is disposable, delete it and its credentials file.`,
      error,
    );
  }

  log.info(
    { port, dataDir, database, logFile: files.logFile, runAs: user?.name, mode: launch.kind },
    "embedded PostgreSQL started",
  );
  return {
    connectionString: `postgresql://${SUPERUSER}:${encodeURIComponent(credentials.password)}@127.0.0.1:${port}/${encodeURIComponent(database)}`,
    port,
    dataDir,
    logFile: files.logFile,
    stop,
    stopWithoutWaiting: () => signalPostmaster(files.dataDir, "SIGINT"),
  };
}

function validateOptions(options: EmbeddedPostgresOptions, database: string): void {
  if (
    options.port !== undefined &&
    !(Number.isInteger(options.port) && options.port > 0 && options.port < 65536)
  ) {
    throw embeddedPostgresError(
      `embedded PostgreSQL: port must be an integer between 1 and 65535, got ${String(options.port)}`,
    );
  }
  if (database.length === 0 || Buffer.byteLength(database) > 63 || database.includes("\0")) {
    throw embeddedPostgresError(
      `embedded PostgreSQL: database name must be 1-63 bytes, got ${JSON.stringify(database)}`,
    );
  }
}

/**
 * The connection string of the embedded server a running service started on `dataDir`, from its
 * credentials file (password and last port); undefined when there is no such cluster. For tools
 * (the CLI) that talk to a running service's database; it does not start anything.
 */
export async function embeddedConnectionString(
  dataDir: string,
  database = DEFAULT_DATABASE,
): Promise<string | undefined> {
  const credentials = await readCredentials(clusterFiles(path.resolve(dataDir)));
  if (!credentials?.port) return undefined;
  return `postgresql://${SUPERUSER}:${encodeURIComponent(credentials.password)}@127.0.0.1:${credentials.port}/${encodeURIComponent(database)}`;
}

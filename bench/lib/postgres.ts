/**
 * One embedded PostgreSQL for the whole bench, in a temp dir, with one database per scenario and
 * contender (so `pg_stat_database` counts one contender's transactions only).
 */
import { readFileSync } from "node:fs";
import path from "node:path";
import pg from "pg";
import { createLogger } from "../../src/core/logger.js";
import { startEmbeddedPostgres } from "../../src/infra/embeddedPostgres/index.js";

export interface BenchPostgres {
  version: string;
  /** A fresh, empty database; returns its connection string. */
  createDatabase(name: string): Promise<string>;
  dropDatabase(name: string): Promise<void>;
  /** The connection string of a database of this server. */
  urlOf(name: string): string;
  /** `xact_commit + xact_rollback` of a database, as pg_stat_database shows it now. */
  transactions(name: string): Promise<number>;
  query<T extends pg.QueryResultRow>(database: string, text: string, values?: unknown[]): Promise<T[]>;
  /** The server's main process (its backends are its children), from its postmaster.pid. */
  serverPid(): number | undefined;
  stop(): Promise<void>;
}

export async function startBenchPostgres(dir: string): Promise<BenchPostgres> {
  const dataDir = path.join(dir, "pg");
  const server = await startEmbeddedPostgres({
    dataDir,
    database: "postgres",
    logger: createLogger({ level: "warn", destination: process.stderr }),
  });
  const admin = new pg.Pool({ connectionString: server.connectionString, max: 2 });
  admin.on("error", () => {});
  try {
    await admin.query("SELECT 1");
  } catch (error) {
    await admin.end().catch(() => {});
    await server.stop();
    throw error;
  }
  const urlOf = (database: string) => {
    const url = new URL(server.connectionString);
    url.pathname = `/${database}`;
    return url.toString();
  };
  const checkName = (name: string) => {
    if (!/^[a-z][a-z0-9_]{0,62}$/.test(name)) throw new Error(`bad database name ${name}`);
  };
  const version = (await admin.query<{ server_version: string }>("SHOW server_version")).rows[0]
    ?.server_version;
  return {
    version: version ?? "unknown",
    urlOf,
    async createDatabase(name) {
      checkName(name);
      await admin.query(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`);
      await admin.query(`CREATE DATABASE "${name}"`);
      return urlOf(name);
    },
    serverPid() {
      try {
        const pid = Number(readFileSync(path.join(dataDir, "postmaster.pid"), "utf8").split("\n")[0]);
        return Number.isInteger(pid) && pid > 0 ? pid : undefined;
      } catch {
        return undefined;
      }
    },
    async dropDatabase(name) {
      checkName(name);
      await admin.query(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`);
    },
    async transactions(name) {
      const result = await admin.query<{ total: string }>(
        "SELECT (xact_commit + xact_rollback)::text AS total FROM pg_stat_database WHERE datname = $1",
        [name],
      );
      const total = result.rows[0]?.total;
      if (total === undefined) throw new Error(`no pg_stat_database row for ${name}`);
      return Number(total);
    },
    async query(database, text, values) {
      const client = new pg.Client({ connectionString: urlOf(database) });
      client.on("error", () => {});
      await client.connect();
      try {
        return (await client.query(text, values)).rows;
      } finally {
        await client.end();
      }
    },
    async stop() {
      await admin.end().catch(() => {});
      await server.stop();
    },
  };
}

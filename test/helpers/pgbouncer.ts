/**
 * A throwaway PgBouncer for tests: Debian's `pgbouncer` (`/usr/sbin/pgbouncer`, or
 * PGBOUNCER_BINARY) on a free 127.0.0.1 port in front of the test server, every database name
 * passed through (`* =`), in the pool mode asked for. PgBouncer refuses to run as root: as root it
 * runs as the `postgres` system user.
 */
import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { accessSync, chmodSync, chownSync, constants, readFileSync, writeFileSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import path from "node:path";
import pg from "pg";
import { freePort } from "./etcdServer.js";
import { pollUntil } from "./poll.js";

export const PGBOUNCER_BINARY = process.env.PGBOUNCER_BINARY ?? "/usr/sbin/pgbouncer";
export const PGBOUNCER_INSTALL_HINT =
  "install it with `apt-get update && apt-get install -y --no-install-recommends pgbouncer` (Debian/Ubuntu) or set PGBOUNCER_BINARY";

export function pgbouncerAvailable(): boolean {
  try {
    accessSync(PGBOUNCER_BINARY, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

const running = new Set<ChildProcess>();
process.on("exit", () => {
  for (const child of running) child.kill("SIGKILL");
});

export type PoolMode = "session" | "transaction" | "statement";

export class PgBouncer {
  readonly port: number;
  readonly dir: string;
  readonly #child: ChildProcess;
  readonly #exited: Promise<void>;

  private constructor(port: number, dir: string, child: ChildProcess) {
    this.port = port;
    this.dir = dir;
    this.#child = child;
    this.#exited = new Promise((resolve) => child.once("exit", () => resolve()));
  }

  /** Starts PgBouncer in `mode` in front of the server of `serverUrl` (its user and password log in). */
  static async start(serverUrl: string, mode: PoolMode): Promise<PgBouncer> {
    const server = new URL(serverUrl);
    const port = await freePort();
    // under /tmp, not $TMPDIR: when root, the postgres user must be able to traverse to it
    const dir = await mkdtemp("/tmp/cronwarden-pgbouncer-");
    const owner = process.getuid?.() === 0 ? postgresIds() : undefined;
    const quote = (value: string) => `'${value.replace(/'/g, "''")}'`;
    const host = server.hostname === "localhost" ? "127.0.0.1" : server.hostname;
    const configFile = path.join(dir, "pgbouncer.ini");
    writeFileSync(
      configFile,
      `[databases]
* = host=${host} port=${server.port || 5432} user=${decodeURIComponent(server.username)} password=${quote(decodeURIComponent(server.password))}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = ${port}
unix_socket_dir =
auth_type = any
pool_mode = ${mode}
max_client_conn = 500
default_pool_size = 60
server_reset_query = DISCARD ALL
ignore_startup_parameters = extra_float_digits,options,statement_timeout
logfile = ${path.join(dir, "pgbouncer.log")}
`,
      { mode: 0o600 },
    );
    chmodSync(dir, 0o700);
    if (owner) {
      chownSync(dir, owner.uid, owner.gid);
      chownSync(configFile, owner.uid, owner.gid);
    }
    const child = spawn(PGBOUNCER_BINARY, [configFile], {
      stdio: ["ignore", "ignore", "pipe"],
      ...(owner ? { uid: owner.uid, gid: owner.gid } : {}),
    });
    running.add(child);
    child.once("exit", () => running.delete(child));
    const bouncer = new PgBouncer(port, dir, child);
    const probeUrl = bouncer.url(server.pathname.slice(1) || "postgres", serverUrl);
    await pollUntil(
      `PgBouncer (${mode}) to answer on 127.0.0.1:${port}`,
      async () => {
        if (child.exitCode !== null)
          throw new Error(`pgbouncer exited (${child.exitCode}): ${bouncer.logTail()}`);
        const client = new pg.Client({ connectionString: probeUrl, connectionTimeoutMillis: 1_000 });
        client.on("error", () => {});
        try {
          await client.connect();
          await client.query("SELECT 1");
          return true;
        } finally {
          await client.end().catch(() => {});
        }
      },
      { timeoutMs: 20_000, intervalMs: 100 },
    ).catch(async (error: Error) => {
      await bouncer.stop();
      throw error;
    });
    return bouncer;
  }

  /** A connection string to `database` through this PgBouncer, with the user and password of `serverUrl`. */
  url(database: string, serverUrl: string): string {
    const url = new URL(serverUrl);
    url.hostname = "127.0.0.1";
    url.port = String(this.port);
    url.pathname = `/${encodeURIComponent(database)}`;
    return url.toString();
  }

  logTail(lines = 20): string {
    try {
      return readFileSync(path.join(this.dir, "pgbouncer.log"), "utf8").split("\n").slice(-lines).join("\n");
    } catch {
      return "(no log)";
    }
  }

  async stop(): Promise<void> {
    if (this.#child.exitCode === null && this.#child.signalCode === null) {
      this.#child.kill("SIGINT"); // PgBouncer's immediate shutdown
      const killer = setTimeout(() => this.#child.kill("SIGKILL"), 5_000);
      await this.#exited;
      clearTimeout(killer);
    }
    await rm(this.dir, { recursive: true, force: true });
  }
}

function postgresIds(): { uid: number; gid: number } {
  try {
    return {
      uid: Number(execFileSync("id", ["-u", "postgres"], { encoding: "utf8" }).trim()),
      gid: Number(execFileSync("id", ["-g", "postgres"], { encoding: "utf8" }).trim()),
    };
  } catch (error) {
    throw new Error("running as root, PgBouncer needs a `postgres` user to run as (it refuses root)", {
      cause: error,
    });
  }
}

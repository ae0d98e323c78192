/**
 * The cluster itself: the superuser's credentials file, creating the cluster with initdb (scram-sha-256), and
 * creating the application's database once the server runs.
 */
import { randomBytes } from "node:crypto";
import fs from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import pg from "pg";
import { toError } from "../../core/logger.js";
import { dataDirArg, describeExit, run, type ServerContext, serverCommand } from "./commands.js";
import { embeddedPostgresError, failure, hintFor, unreachable } from "./errors.js";
import { appendToLog, type ClusterFiles, exists } from "./files.js";

export const SUPERUSER = "postgres";

export interface Credentials {
  user: string;
  password: string;
  /** The port the server last ran on, tried first on the next start. */
  port?: number;
}

/** The cluster's credentials, after creating the cluster when its directory has no `PG_VERSION` yet. */
export async function loadOrInitCluster(ctx: ServerContext): Promise<Credentials> {
  const { files } = ctx;
  const stored = await readCredentials(files);
  if (!(await exists(path.join(files.dataDir, "PG_VERSION")))) {
    await initCluster(ctx, stored);
  } else if (!stored) {
    throw embeddedPostgresError(
      `embedded PostgreSQL: the cluster in ${files.dataDir} exists but its credentials file ${files.credentialsFile} is missing or unreadable, so the superuser password is unknown.\n  fix: restore that file, or delete ${files.dataDir} to create a fresh (empty) cluster.`,
    );
  }
  return (await readCredentials(files)) ?? unreachable("credentials written by initCluster");
}

export async function readCredentials(files: ClusterFiles): Promise<Credentials | undefined> {
  let raw: string;
  try {
    raw = await fs.readFile(files.credentialsFile, "utf8");
  } catch {
    return undefined;
  }
  try {
    const parsed = JSON.parse(raw) as Partial<Credentials>;
    if (typeof parsed.password !== "string" || parsed.password.length === 0) return undefined;
    const port = typeof parsed.port === "number" && Number.isInteger(parsed.port) ? parsed.port : undefined;
    return { user: SUPERUSER, password: parsed.password, ...(port === undefined ? {} : { port }) };
  } catch {
    return undefined;
  }
}

/** Atomically replaces the credentials file (mode 0600). */
export async function writeCredentials(files: ClusterFiles, credentials: Credentials): Promise<void> {
  const staging = `${files.credentialsFile}.tmp-${process.pid}`;
  await fs.writeFile(staging, `${JSON.stringify(credentials, null, 2)}\n`, { mode: 0o600 });
  await fs.chmod(staging, 0o600);
  await fs.rename(staging, files.credentialsFile);
}

async function initCluster(ctx: ServerContext, stored: Credentials | undefined): Promise<void> {
  const { files, log } = ctx;
  const leftovers = await fs.readdir(files.dataDir);
  if (leftovers.length > 0) {
    throw embeddedPostgresError(
      `embedded PostgreSQL: ${files.dataDir} is not empty but has no PG_VERSION, so it is not a PostgreSQL cluster (found: ${leftovers.slice(0, 5).join(", ")}${leftovers.length > 5 ? ", ..." : ""}).\n  fix: point dataDir at an empty or new directory, or delete this one if it is a leftover of an interrupted first start.`,
    );
  }
  // The password is saved before initdb so a crash in between cannot leave a cluster with an unknown password.
  const credentials: Credentials = stored ?? {
    user: SUPERUSER,
    password: randomBytes(24).toString("base64url"),
  };
  await writeCredentials(files, credentials);

  const pwDir = await fs.mkdtemp(path.join(os.tmpdir(), "cronwarden-pg-pw-"));
  try {
    const pwFile = path.join(pwDir, "pw");
    await fs.writeFile(pwFile, `${credentials.password}\n`, { mode: 0o600 });
    if (ctx.launch.kind !== "self") {
      await fs.chown(pwDir, ctx.launch.user.uid, ctx.launch.user.gid);
      await fs.chown(pwFile, ctx.launch.user.uid, ctx.launch.user.gid);
    }
    const spec = serverCommand(ctx, "initdb", [
      "-D",
      dataDirArg(ctx),
      "-U",
      SUPERUSER,
      "--auth=scram-sha-256",
      `--pwfile=${pwFile}`,
      "--encoding=UTF8",
      "--locale=C",
      "--no-instructions",
    ]);
    log.info({ dataDir: files.dataDir }, "initializing a new PostgreSQL cluster");
    const result = await run(spec, { timeoutMs: 300_000 }).catch((error: unknown) => {
      throw failure(
        "embedded PostgreSQL: initdb could not be run.",
        {
          command: spec.display,
          output: toError(error).message,
          files,
          hint: "reinstall dependencies (`npm ci`).",
        },
        error,
      );
    });
    await appendToLog(
      files.logFile,
      `\n--- cronwarden: initdb at ${new Date().toISOString()} ---\n${result.output}`,
    );
    if (result.code !== 0) {
      throw failure(`embedded PostgreSQL: initdb failed (${describeExit(result)}).`, {
        command: spec.display,
        output: result.output,
        files,
        hint: hintFor(result.output, files),
      });
    }
  } finally {
    await fs.rm(pwDir, { recursive: true, force: true });
  }
}

/** Creates `database` on the running server unless it exists (tolerates a concurrent creation). */
export async function ensureDatabase(port: number, password: string, database: string): Promise<void> {
  const client = new pg.Client({
    host: "127.0.0.1",
    port,
    user: SUPERUSER,
    password,
    database: "postgres",
    connectionTimeoutMillis: 10_000,
  });
  client.on("error", () => {
    // reported through the awaited calls
  });
  await client.connect();
  try {
    const found = await client.query("SELECT 1 FROM pg_database WHERE datname = $1", [database]);
    if (found.rowCount === 0) {
      try {
        await client.query(`CREATE DATABASE ${quoteIdentifier(database)}`);
      } catch (error) {
        if ((error as { code?: unknown }).code !== "42P04") throw error; // created concurrently
      }
    }
  } finally {
    await client.end();
  }
}

function quoteIdentifier(name: string): string {
  return `"${name.replace(/"/g, '""')}"`;
}

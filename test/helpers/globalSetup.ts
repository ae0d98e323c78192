/**
 * Vitest global setup: one PostgreSQL server for the whole run.
 * - `TEST_DATABASE_URL` set: use that server (any database on it; the URL's user must be allowed to create
 *   and drop databases).
 * - otherwise: start a throwaway embedded PostgreSQL in a fresh temp dir on a free port; stop and delete it
 *   in teardown. If vitest is ended from outside (SIGINT, SIGTERM, SIGHUP: vitest exits without its
 *   teardown), an exit hook stops the server and deletes the dir instead (see `stopOnExit`); SIGKILL cannot be
 *   caught: then the server is left running.
 * Test files get the admin URL through `inject("databaseUrl")` (see `adminUrl()` in ./database.ts).
 */
import { spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import type { TestProject } from "vitest/node";
import { createLogger } from "../../src/core/logger.js";
import { startEmbeddedPostgres } from "../../src/infra/embeddedPostgres/index.js";

declare module "vitest" {
  export interface ProvidedContext {
    /** Connection string of the test server, as an admin (superuser) of its `postgres` database. */
    databaseUrl: string;
  }
}

export default async function setup(project: TestProject): Promise<(() => Promise<void>) | undefined> {
  const external = process.env.TEST_DATABASE_URL;
  if (external) {
    project.provide("databaseUrl", external);
    return undefined;
  }

  const dir = await mkdtemp(path.join(os.tmpdir(), "cronwarden-test-"));
  const logger = createLogger({ level: process.env.LOG_LEVEL ?? "warn", destination: process.stderr });
  let server: Awaited<ReturnType<typeof startEmbeddedPostgres>>;
  try {
    server = await startEmbeddedPostgres({ dataDir: path.join(dir, "data"), database: "postgres", logger });
  } catch (error) {
    await rm(dir, { recursive: true, force: true });
    throw error;
  }
  project.provide("databaseUrl", server.connectionString);
  const forget = stopOnExit(server.dataDir, dir);

  return async () => {
    try {
      await server.stop();
      forget();
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  };
}

/**
 * On SIGINT/SIGTERM vitest calls process.exit() without running the global teardown, and a SIGHUP would end
 * the process without even that; the postmaster, detached by pg_ctl, would outlive it. So, until the teardown
 * has stopped the server: a SIGHUP exits normally, and at exit (sync only) the postmaster gets SIGINT, its fast
 * shutdown (what `pg_ctl stop -m fast` sends), and a detached shell deletes `dir` once it is gone. The pid is
 * read back from postmaster.pid at that moment: a server already down (no pid file) is not signalled.
 * Returns the function that removes the hooks.
 */
function stopOnExit(dataDir: string, dir: string): () => void {
  const onExit = () => {
    const pid = postmasterPid(dataDir);
    if (pid === undefined) return;
    try {
      process.kill(pid, "SIGINT");
    } catch {
      return; // not running
    }
    const removeWhenDown =
      'i=0; while kill -0 "$1" 2>/dev/null && [ "$i" -lt 300 ]; do sleep 0.1; i=$((i+1)); done; rm -rf -- "$2"';
    spawn("sh", ["-c", removeWhenDown, "sh", String(pid), dir], { detached: true, stdio: "ignore" }).unref();
  };
  const onHangup = () => process.exit(128 + 1);
  process.once("exit", onExit);
  process.once("SIGHUP", onHangup);
  return () => {
    process.off("exit", onExit);
    process.off("SIGHUP", onHangup);
  };
}

function postmasterPid(dataDir: string): number | undefined {
  try {
    const pid = Number.parseInt(
      readFileSync(path.join(dataDir, "postmaster.pid"), "utf8").split("\n")[0] ?? "",
      10,
    );
    return Number.isInteger(pid) && pid > 0 ? pid : undefined;
  } catch {
    return undefined;
  }
}

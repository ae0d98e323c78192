/**
 * Vitest global setup: one PostgreSQL server for the whole run.
 * - `TEST_DATABASE_URL` set: use that server (any database on it; the URL's user must be allowed to create
 *   and drop databases).
 * - otherwise: start a throwaway embedded PostgreSQL in a fresh temp dir on a free port; stop and delete it
 *   in teardown.
 * Test files get the admin URL through `inject("databaseUrl")` (see `adminUrl()` in ./database.ts).
 */
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

  return async () => {
    try {
      await server.stop();
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  };
}

import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import type { Pool } from "pg";
import { afterAll, afterEach, beforeAll } from "vitest";
import { createTestDatabase, type TestDatabase } from "./database.js";
import { ServiceProcess } from "./processes.js";

/** What a test file that runs the service as OS processes shares: one database, a folder, its children. */
export interface ProcessSuite {
  readonly db: TestDatabase;
  /** A temporary folder for the config files, removed after the file's tests. */
  readonly dir: string;
  /** Push each started process here: it is killed after each test, and the job tables emptied. */
  readonly processes: ServiceProcess[];
}

/** Registers the file's hooks: a test database and a folder for all tests, a clean slate after each. */
export function processSuite(name: string): ProcessSuite {
  let db: TestDatabase | undefined;
  let dir: string | undefined;
  const processes: ServiceProcess[] = [];

  beforeAll(async () => {
    db = await createTestDatabase();
    dir = await mkdtemp(path.join(tmpdir(), `cronwarden-${name}-`));
  });

  afterEach(async () => {
    await Promise.all(processes.splice(0).map((child) => child.kill()));
    if (db) await emptyJobTables(db.pool);
  });

  afterAll(async () => {
    await db?.drop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  return {
    get db() {
      if (!db) throw new Error("processSuite: the database is ready only inside tests and hooks");
      return db;
    },
    get dir() {
      if (!dir) throw new Error("processSuite: the folder is ready only inside tests and hooks");
      return dir;
    },
    processes,
  };
}

/**
 * Empties the jobs and their runs between tests, keeping the tables as the schema made them: the
 * run log is partitioned, and a table dropped here would come back unpartitioned from Agenda's DDL.
 */
export async function emptyJobTables(pool: Pool): Promise<void> {
  await pool.query(`DO $$ BEGIN
    IF to_regclass('agenda_jobs') IS NOT NULL THEN TRUNCATE agenda_jobs, agenda_logs; END IF;
    IF to_regclass('cronwarden_run_starts') IS NOT NULL THEN TRUNCATE cronwarden_run_starts; END IF;
  END $$`);
}

/**
 * An instance of the fixture service (test/fixtures/instance.ts) on the suite's database, named
 * `id`, reading `configFile`, with the fleet tests' quick settings: a 1 s minimum interval, a
 * 500 ms poll and a 3 s lock lifetime, each overridden by `env` like any other variable. The caller
 * pushes it to `suite.processes`.
 */
export function fixtureInstance(
  suite: ProcessSuite,
  id: string,
  configFile: string,
  env: NodeJS.ProcessEnv = {},
): ServiceProcess {
  return new ServiceProcess("test/fixtures/instance.ts", {
    DATABASE_URL: suite.db.url,
    CRONWARDEN_CONFIG_FILE: configFile,
    CRONWARDEN_INSTANCE_ID: id,
    CRONWARDEN_MIN_INTERVAL_MS: "1000",
    CRONWARDEN_PROCESS_EVERY_MS: "500",
    CRONWARDEN_LOCK_LIFETIME_MS: "3000",
    ...env,
  });
}

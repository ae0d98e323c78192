import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, afterEach, beforeAll } from "vitest";
import { createTestDatabase, type TestDatabase } from "./database.js";
import type { ServiceProcess } from "./processes.js";

/** What a test file that runs the service as OS processes shares: one database, a folder, its children. */
export interface ProcessSuite {
  readonly db: TestDatabase;
  /** A temporary folder for the config files, removed after the file's tests. */
  readonly dir: string;
  /** Push each started process here: it is killed after each test, and the job tables dropped. */
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
    await db?.pool.query("DROP TABLE IF EXISTS agenda_jobs, agenda_logs CASCADE");
    // the runs in progress of the dropped jobs (a table the schema's version keeps)
    await db?.pool.query(
      "DO $$ BEGIN IF to_regclass('cronwarden_run_starts') IS NOT NULL THEN TRUNCATE cronwarden_run_starts; END IF; END $$",
    );
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

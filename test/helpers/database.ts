/**
 * Per-test-file databases on the server started (or named by TEST_DATABASE_URL) in ./globalSetup.ts.
 *
 *   const db = await createTestDatabase();   // beforeAll
 *   ... db.pool / db.url ...
 *   await db.drop();                          // afterAll
 */
import { randomBytes } from "node:crypto";
import pg from "pg";
import { inject } from "vitest";

export interface TestDatabase {
  /** Connection string of the fresh database. */
  url: string;
  /** A pool on it, ended by `drop()`. */
  pool: pg.Pool;
  /** Ends the pool and drops the database (WITH (FORCE)). Idempotent. */
  drop(): Promise<void>;
}

/** Connection string of the test server as an admin (connected to its `postgres` database, or TEST_DATABASE_URL's). */
export function adminUrl(): string {
  const url = inject("databaseUrl");
  if (!url) {
    throw new Error(
      "no test database URL was provided: run tests through vitest with test/helpers/globalSetup.ts as globalSetup (vitest.config.ts)",
    );
  }
  return url;
}

/** Creates a uniquely named, empty database; use one per test file for isolation. */
export async function createTestDatabase(): Promise<TestDatabase> {
  const admin = adminUrl();
  const name = `cw_test_${process.pid}_${Date.now().toString(36)}_${randomBytes(3).toString("hex")}`;
  await withAdminClient(admin, (client) => client.query(`CREATE DATABASE "${name}"`));

  const url = withDatabase(admin, name);
  const pool = new pg.Pool({ connectionString: url, max: 10 });
  // An idle client may be cut off (e.g. by the DROP ... WITH (FORCE)); pg emits that on the pool.
  pool.on("error", () => {});

  let dropping: Promise<void> | undefined;
  const drop = () => {
    dropping ??= (async () => {
      await pool.end();
      await withAdminClient(admin, (client) =>
        client.query(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`),
      );
    })();
    return dropping;
  };
  return { url, pool, drop };
}

/** The same server and credentials as `url`, connected to `database`. */
export function withDatabase(url: string, database: string): string {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new Error(
      "the test database URL must be a postgres:// or postgresql:// URL, not a keyword/value string",
    );
  }
  parsed.pathname = `/${encodeURIComponent(database)}`;
  return parsed.toString();
}

async function withAdminClient<T>(url: string, use: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: url });
  client.on("error", () => {});
  await client.connect();
  try {
    return await use(client);
  } finally {
    await client.end();
  }
}

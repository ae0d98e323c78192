import { spawn } from "node:child_process";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, expect, it } from "vitest";
import { createTestDatabase, type TestDatabase } from "../helpers/database.js";

/**
 * The built package (`npm run build`, dist/) as a consumer uses it: plain Node, no TypeScript
 * loader, `import { createScheduler } from "cronwarden"`. One scheduler runs a task once, and
 * the admin server serves the dashboard's static files from dist/.
 */

let db: TestDatabase;
let dir: string;

beforeAll(async () => {
  db = await createTestDatabase();
  dir = await mkdtemp(path.join(tmpdir(), "cronwarden-package-"));
});

afterAll(async () => {
  await db?.drop();
  await rm(dir, { recursive: true, force: true });
});

const CONSUMER = `
import pg from "pg";
import { createAdminServer, createLogger, createScheduler, FileConfigSource } from "cronwarden";

const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL });
const scheduler = createScheduler({
  pool,
  config: new FileConfigSource({ path: process.env.CONFIG_FILE }),
  logger: createLogger({ level: "warn" }),
  minIntervalMs: 1000,
});
scheduler.register({
  name: "consumer",
  handler: async (context) => console.log("ran " + context.taskName + " for " + context.scheduledAt.toISOString()),
});
const admin = createAdminServer({ scheduler, port: 0, logger: createLogger({ level: "warn" }) });
scheduler.once("run:finished", async (event) => {
  console.log("outcome " + event.outcome);
  const { url } = await admin.listen();
  const page = await fetch(url + "/dashboard/");
  console.log("dashboard " + page.status + " " + (await page.text()).includes("<html"));
  await admin.close();
  await scheduler.stop();
  await pool.end();
});
await scheduler.start();
`;

it("runs under plain Node from dist/, imported by its package name", async () => {
  const configFile = path.join(dir, "tasks.json");
  await writeFile(
    configFile,
    JSON.stringify({ tasks: [{ name: "consumer", enabled: true, cron: "* * * * * *" }] }),
  );
  const child = spawn(process.execPath, ["--input-type=module", "-e", CONSUMER], {
    cwd: process.cwd(), // inside the package, so "cronwarden" resolves to its own exports (dist/)
    env: { ...process.env, DATABASE_URL: db.url, CONFIG_FILE: configFile, NODE_OPTIONS: "" },
  });
  let out = "";
  let err = "";
  child.stdout.on("data", (chunk) => {
    out += chunk;
  });
  child.stderr.on("data", (chunk) => {
    err += chunk;
  });
  const code = await new Promise<number | null>((resolve) => child.on("exit", resolve));
  expect({ code, err }).toEqual({ code: 0, err: "" });
  expect(out).toMatch(
    /^ran consumer for \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.000Z\noutcome succeeded\ndashboard 200 true\n$/,
  );
}, 30_000);

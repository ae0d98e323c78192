import { randomBytes } from "node:crypto";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runCli } from "../../src/cli/main.js";
import { SCHEMA_VERSION } from "../../src/engine/schema.js";
import { CronwardenError } from "../../src/index.js";
import { adminUrl, createTestDatabase, type TestDatabase } from "../helpers/database.js";
import { pollUntil, SchedulerHarness, yamlOf } from "../helpers/harness.js";
import { ServiceProcess } from "../helpers/processes.js";

/**
 * The roles of docs/operations.md, created by running its SQL as written (role names, passwords
 * and the database name made unique to this file): the migrator creates the schema with
 * `cronwarden migrate`; the service role runs the scheduler (runs, reconciles, run-now,
 * retention) and the reference service, and is refused every schema change.
 */

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
const suffix = `${process.pid}_${randomBytes(3).toString("hex")}`;
const SERVICE_ROLE = `cw_service_${suffix}`;
const MIGRATOR_ROLE = `cw_migrator_${suffix}`;
const SERVICE_PASSWORD = `svc-${randomBytes(12).toString("hex")}`;
const MIGRATOR_PASSWORD = `mig-${randomBytes(12).toString("hex")}`;

let db: TestDatabase;
let servicePool: pg.Pool;
let serviceUrl: string;
let migratorUrl: string;
let configDir: string;
const harnesses: SchedulerHarness[] = [];

/** The first ```sql block of docs/operations.md's "Database roles" section, made unique to this test. */
async function rolesSql(database: string): Promise<string> {
  const doc = await readFile(path.join(root, "docs/operations.md"), "utf8");
  const section = doc.slice(doc.indexOf("## Database roles"));
  const block = /```sql\n([\s\S]*?)```/.exec(section)?.[1];
  if (!block) throw new Error("docs/operations.md has no ```sql block under ## Database roles");
  return block
    .replaceAll("cronwarden_migrator", MIGRATOR_ROLE)
    .replaceAll("cronwarden_service", SERVICE_ROLE)
    .replaceAll("DATABASE cronwarden ", `DATABASE "${database}" `)
    .replaceAll("'change-me-migrator'", `'${MIGRATOR_PASSWORD}'`)
    .replaceAll("'change-me-service'", `'${SERVICE_PASSWORD}'`);
}

function asRole(url: string, role: string, password: string): string {
  const parsed = new URL(url);
  parsed.username = role;
  parsed.password = password;
  return parsed.toString();
}

beforeAll(async () => {
  db = await createTestDatabase();
  const database = decodeURIComponent(new URL(db.url).pathname.slice(1));
  const sql = await rolesSql(database);
  expect(sql).toContain(`CREATE ROLE ${SERVICE_ROLE} LOGIN`);
  await db.pool.query(sql);
  serviceUrl = asRole(db.url, SERVICE_ROLE, SERVICE_PASSWORD);
  migratorUrl = asRole(db.url, MIGRATOR_ROLE, MIGRATOR_PASSWORD);
  servicePool = new pg.Pool({ connectionString: serviceUrl, max: 10 });
  servicePool.on("error", () => {});
  configDir = await mkdtemp(path.join(tmpdir(), "cronwarden-roles-"));
});

afterAll(async () => {
  for (const harness of harnesses) await harness.stop().catch(() => {});
  await servicePool?.end();
  await db?.drop();
  const admin = new pg.Client({ connectionString: adminUrl() });
  await admin.connect();
  try {
    await admin.query(`DROP ROLE IF EXISTS ${SERVICE_ROLE}`);
    await admin.query(`DROP ROLE IF EXISTS ${MIGRATOR_ROLE}`);
  } finally {
    await admin.end();
  }
  await rm(configDir, { recursive: true, force: true });
});

async function cli(...argv: string[]) {
  const out: string[] = [];
  const err: string[] = [];
  const code = await runCli(argv, {
    out: (line) => out.push(line),
    err: (line) => err.push(line),
    env: {},
    cwd: configDir,
  });
  return { code, out, err };
}

/** The reference service as the service role, with schema changes off, on a 1 s heartbeat. */
async function startService(): Promise<ServiceProcess> {
  const configFile = path.join(configDir, "tasks.yaml");
  await writeFile(configFile, yamlOf([{ name: "heartbeat" }, { name: "reportRollup", enabled: false }]));
  return new ServiceProcess("service/main.ts", {
    DATABASE_URL: serviceUrl,
    CRONWARDEN_MIGRATE: "false",
    CRONWARDEN_CONFIG_FILE: configFile,
    CRONWARDEN_MIN_INTERVAL_MS: "1000",
    CRONWARDEN_ADMIN_ENABLED: "false",
    LOG_LEVEL: "info",
  });
}

const sqlState = (promise: Promise<unknown>) =>
  promise.then(
    () => "accepted",
    (error: { code?: string }) => error.code,
  );

describe("before the migration", () => {
  it("with CRONWARDEN_MIGRATE=false on an empty database the service refuses to start, naming cronwarden migrate", async () => {
    const service = await startService();
    try {
      expect(await service.exited).toEqual({ code: 1, signal: null });
      const fatal = service.find((line) => /^cronwarden could not start/.test(String(line.msg)));
      expect(fatal?.msg).toMatch(
        /the database schema is not current \(the database has none of cronwarden's tables\) and schema changes are turned off .*: run `cronwarden migrate` with a role that may change the schema/,
      );
      expect((fatal?.err as { code?: string } | undefined)?.code).toBe("SCHEMA_NOT_CURRENT");
      expect(JSON.stringify(service.lines)).not.toContain(SERVICE_PASSWORD);
    } finally {
      await service.kill();
    }
  });

  it("the service role cannot create the schema either when migrations are left on: the error names the fix", async () => {
    const harness = SchedulerHarness.create(servicePool, [{ name: "lp-never", handler: async () => {} }]);
    harnesses.push(harness);
    const error = await harness.scheduler.start().then(
      () => undefined,
      (caught: unknown) => caught,
    );
    expect(error).toBeInstanceOf(CronwardenError);
    expect((error as CronwardenError).code).toBe("SCHEMA_NOT_CURRENT");
    expect((error as Error).message).toMatch(
      /could not create or upgrade the schema: permission denied for schema public\. Schema changes need the migrator role and `cronwarden migrate`/,
    );
    expect(await cli("migrate", "--check", "--database-url", serviceUrl)).toMatchObject({
      code: 1,
      out: [
        expect.stringMatching(/^schema is not current: missing agenda_jobs, .*; run `cronwarden migrate`$/),
      ],
    });
  });
});

describe("cronwarden migrate, then the service role", () => {
  it("the migrator creates the schema with `cronwarden migrate` and exits; a second run changes nothing", async () => {
    expect(await cli("migrate", "--database-url", migratorUrl)).toEqual({
      code: 0,
      out: [`schema migrated from version (none) to ${SCHEMA_VERSION}`],
      err: [],
    });
    expect((await cli("migrate", "--database-url", migratorUrl)).out).toEqual([
      `schema already current (version ${SCHEMA_VERSION}); nothing changed`,
    ]);
    expect(await cli("migrate", "--check", "--database-url", serviceUrl)).toMatchObject({
      code: 0,
      out: [`schema is current (version ${SCHEMA_VERSION})`],
    });
    const owners = await db.pool.query<{ owner: string }>(
      `SELECT DISTINCT tableowner AS owner FROM pg_tables WHERE schemaname = 'public'`,
    );
    expect(owners.rows).toEqual([{ owner: MIGRATOR_ROLE }]);
  });

  it("the service role is refused every schema change: CREATE, ALTER, DROP, CREATE INDEX, TRUNCATE, temporary tables", async () => {
    const attempts = {
      create: "CREATE TABLE lp_intruder (id int)",
      createView: "CREATE VIEW lp_view AS SELECT 1",
      alter: "ALTER TABLE agenda_jobs ADD COLUMN lp_intruder int",
      alterAudit: "ALTER TABLE cronwarden_audit DROP CONSTRAINT cronwarden_audit_kind_check",
      drop: "DROP TABLE agenda_logs",
      index: "CREATE INDEX lp_idx ON agenda_logs (job_name)",
      truncate: "TRUNCATE cronwarden_audit",
      temporary: "CREATE TEMP TABLE lp_temp (id int)",
      schemaVersion: "UPDATE cronwarden_schema SET version = version",
    };
    const results: Record<string, string | undefined> = {};
    for (const [name, statement] of Object.entries(attempts))
      results[name] = await sqlState(servicePool.query(statement));
    // 42501 insufficient_privilege for each DDL; a row update is what the role is for
    expect(results).toEqual({
      create: "42501",
      createView: "42501",
      alter: "42501",
      alterAudit: "42501",
      drop: "42501",
      index: "42501",
      truncate: "42501",
      temporary: "42501",
      schemaVersion: "accepted",
    });
  });

  it("the reference service starts as the service role with CRONWARDEN_MIGRATE=false and runs its heartbeat", async () => {
    const service = await startService();
    try {
      await service.waitFor(
        "the schema check",
        (line) => line.msg === "schema is current (schema changes are off)",
      );
      await service.waitFor(
        "a heartbeat run",
        (line) => line.task === "heartbeat" && /^run succeeded/.test(String(line.msg)),
      );
      service.child.kill("SIGTERM");
      expect(await service.exited).toEqual({ code: 0, signal: null });
      expect(service.lines.filter((line) => (line.level ?? 0) >= 50)).toEqual([]);
    } finally {
      await service.kill();
    }
  });

  it("the scheduler runs, reconciles, runs now and prunes as the service role, with no permission error", async () => {
    const harness = SchedulerHarness.create(
      servicePool,
      [
        { name: "lp-tick", handler: async () => {} },
        { name: "lp-manual", handler: async () => {} },
      ],
      { migrate: false, namespace: "least-privilege", antiEntropyMs: 0 },
    );
    harnesses.push(harness);
    await harness.writeRaw(yamlOf([{ name: "lp-tick" }, { name: "lp-manual", cron: "0 0 0 1 1 *" }]));
    const ticks = harness.runsOf("lp-tick", 2);
    await harness.scheduler.start();
    await ticks; // runs: lock, renew, record

    // a reconcile: an in-place schedule change, its audit rows and the stored desired state
    const reconciled = await harness.writeConfig([
      { name: "lp-tick", cron: "*/2 * * * * *" },
      { name: "lp-manual", cron: "0 0 0 1 1 *" },
    ]);
    expect(reconciled.applied.map((action) => [action.kind, action.task])).toEqual([["update", "lp-tick"]]);
    const audit = await harness.scheduler.auditTrail({ task: "lp-tick" });
    expect(audit[0]).toMatchObject({ kind: "change", field: "cron", newValue: "*/2 * * * * *" });

    // run now, with who asked
    expect(await harness.scheduler.runNow("lp-manual", { requestedBy: "ops-bob" })).toMatchObject({
      status: "queued",
    });
    const [manual] = await pollUntil("the manual run's record", async () => {
      const runs = await harness.scheduler.runs("lp-manual", 1);
      return runs.length > 0 ? runs : undefined;
    });
    expect(manual).toMatchObject({ trigger: "manual", requestedBy: "ops-bob", outcome: "succeeded" });

    // the missed-slot check (its claim is a row update) and retention (a try-lock and deletes)
    await harness.scheduler.checkMissedSlots();
    const rows = await db.pool.query<{ n: number }>("SELECT count(*)::int AS n FROM agenda_logs");
    expect(rows.rows[0]?.n).toBeGreaterThan(0);
    const deleted = await harness.scheduler.pruneRunHistory(new Date(Date.now() + 31 * 86_400_000));
    expect(deleted).toBeGreaterThan(0);

    const problems = harness.logs.lines.filter(
      (line) => (line.level ?? 0) >= 40 && /permission|denied|must be owner/i.test(JSON.stringify(line)),
    );
    expect(problems).toEqual([]);
  });
});

import { writeFile } from "node:fs/promises";
import path from "node:path";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { CliIo } from "../../src/cli/common.js";
import { migrateCommand } from "../../src/cli/migrateCommand.js";
import { JobNotificationChannel } from "../../src/engine/notificationChannel.js";
import { detectPoolingMode } from "../../src/engine/sessionPooling.js";
import { adminUrl } from "../helpers/database.js";
import { type ConfigEntry, yamlOf } from "../helpers/harness.js";
import {
  PGBOUNCER_BINARY,
  PGBOUNCER_INSTALL_HINT,
  PgBouncer,
  pgbouncerAvailable,
} from "../helpers/pgbouncer.js";
import { pollUntil } from "../helpers/poll.js";
import { ServiceProcess } from "../helpers/processes.js";
import { processSuite } from "../helpers/processSuite.js";
import { STARTS } from "../helpers/runStarts.js";

/**
 * cronwarden through PgBouncer (Debian's `pgbouncer`, test/helpers/pgbouncer.ts). Session mode:
 * the core multi-process scenarios work unchanged (runs, a takeover after SIGKILL through the
 * liveness lock, the reconcile lock, job notifications by LISTEN). Transaction and statement
 * mode: detected, and the service refuses to start naming the mode and the fix
 * (src/engine/sessionPooling.ts). Required when CRONWARDEN_REQUIRE_PGBOUNCER=1, skipped otherwise.
 */

const available = pgbouncerAvailable();
const required = process.env.CRONWARDEN_REQUIRE_PGBOUNCER === "1";
if (!available && !required) {
  console.warn(`PgBouncer tests skipped: ${PGBOUNCER_BINARY} is missing; ${PGBOUNCER_INSTALL_HINT}`);
}

it.runIf(!available && required)("has PgBouncer to test against (CRONWARDEN_REQUIRE_PGBOUNCER=1)", () => {
  expect.fail(`${PGBOUNCER_BINARY} is missing and CRONWARDEN_REQUIRE_PGBOUNCER=1; ${PGBOUNCER_INSTALL_HINT}`);
});

const suite = processSuite("pgbouncer");

describe.skipIf(!available)(`through PgBouncer${available ? "" : " (skipped: pgbouncer missing)"}`, () => {
  const bouncers = new Map<string, PgBouncer>();

  beforeAll(async () => {
    for (const mode of ["session", "transaction", "statement"] as const)
      bouncers.set(mode, await PgBouncer.start(adminUrl(), mode));
  });

  afterAll(async () => {
    await Promise.all([...bouncers.values()].map((bouncer) => bouncer.stop()));
  });

  /** The suite's database through the PgBouncer in `mode`. */
  const urlThrough = (mode: string) => {
    const bouncer = bouncers.get(mode) as PgBouncer;
    return bouncer.url(new URL(suite.db.url).pathname.slice(1), suite.db.url);
  };

  async function cluster(names: string[], config: ConfigEntry[], environment: NodeJS.ProcessEnv = {}) {
    const configFile = path.join(suite.dir, `${names.join("-")}.yaml`);
    await writeFile(configFile, yamlOf(config));
    const peers = names.map(
      (name) =>
        new ServiceProcess("test/fixtures/instance.ts", {
          DATABASE_URL: urlThrough("session"),
          CRONWARDEN_CONFIG_FILE: configFile,
          CRONWARDEN_INSTANCE_ID: name,
          CRONWARDEN_MIN_INTERVAL_MS: "1000",
          CRONWARDEN_PROCESS_EVERY_MS: "500",
          CRONWARDEN_LOCK_LIFETIME_MS: "2000",
          ...environment,
        }),
    );
    suite.processes.push(...peers);
    await Promise.all(
      peers.map((peer) => peer.waitFor("the start", (line) => /^scheduler started/.test(String(line.msg)))),
    );
    return peers;
  }

  it("tells the pooling mode apart: PostgreSQL itself and session mode keep sessions, transaction and statement mode do not", async () => {
    const modeOf = async (url: string) => {
      const pool = new pg.Pool({ connectionString: url, max: 3 });
      pool.on("error", () => {});
      try {
        return await detectPoolingMode(pool);
      } finally {
        await pool.end();
      }
    };
    expect(await modeOf(suite.db.url)).toBe("session");
    expect(await modeOf(urlThrough("session"))).toBe("session");
    expect(await modeOf(urlThrough("transaction"))).toBe("transaction");
    expect(await modeOf(urlThrough("statement"))).toBe("statement");
  });

  for (const mode of ["transaction", "statement"]) {
    it(`in ${mode} mode the service refuses to start, naming the mode and the fix, and changes nothing`, async () => {
      const configFile = path.join(suite.dir, `${mode}.yaml`);
      await writeFile(configFile, yamlOf([{ name: "quick", cron: "*/2 * * * * *" }]));
      const child = new ServiceProcess("test/fixtures/instance.ts", {
        DATABASE_URL: urlThrough(mode),
        CRONWARDEN_CONFIG_FILE: configFile,
        CRONWARDEN_INSTANCE_ID: `refused-${mode}`,
        CRONWARDEN_MIN_INTERVAL_MS: "1000",
      });
      suite.processes.push(child);
      const { code } = await child.exited;
      expect(code).toBe(1);
      const fatal = child.find((line) => line.level === 60 || /could not start/.test(String(line.msg)));
      expect(String(fatal?.msg)).toContain(
        `a pooler in ${mode} pooling mode (PgBouncer pool_mode = ${mode})`,
      );
      expect(String(fatal?.msg)).toContain("pool_mode = session");
      expect(fatal?.err).toMatchObject({ code: "POOLER_MODE_UNSUPPORTED" });
      // refused before the schema: no table was created, no lock taken
      const { rows } = await suite.db.pool.query("SELECT to_regclass('agenda_jobs') AS jobs");
      expect(rows).toEqual([{ jobs: null }]);
    });
  }

  it("`cronwarden migrate` through transaction mode refuses too (its schema lock is a session lock)", async () => {
    const output: string[] = [];
    const io = {
      out: (text: string) => output.push(text),
      err: (text: string) => output.push(text),
      env: {},
      cwd: suite.dir,
    } satisfies CliIo;
    await expect(migrateCommand({ "database-url": urlThrough("transaction") }, io)).rejects.toThrow(
      /transaction pooling mode .*pool_mode = session/,
    );
    const { rows } = await suite.db.pool.query("SELECT to_regclass('agenda_jobs') AS jobs");
    expect(rows).toEqual([{ jobs: null }]);
  });

  it("session mode: two instances started at once (the reconcile lock) run every 2 s slot exactly once", async () => {
    await cluster(
      ["s1", "s2"],
      [
        { name: "quick", cron: "*/2 * * * * *" },
        { name: "slow", enabled: false },
      ],
    );
    const { rows: jobs } = await suite.db.pool.query(
      "SELECT name, count(*)::int AS n FROM agenda_jobs GROUP BY name ORDER BY name",
    );
    expect(jobs).toEqual([
      { name: "quick", n: 1 },
      { name: "slow", n: 1 },
    ]);
    // the config was applied once, under the reconcile lock: one audit row per task and field
    const { rows: audit } = await suite.db.pool.query(
      "SELECT task, field, count(*)::int AS n FROM cronwarden_audit GROUP BY task, field HAVING count(*) > 1",
    );
    expect(audit).toEqual([]);
    const runs = await pollUntil(
      "6 finished slots",
      async () => {
        const { rows } = await suite.db.pool.query<{ slot: string }>(
          `SELECT meta->>'scheduledAt' AS slot FROM agenda_logs WHERE job_name = 'quick' AND event = 'success'`,
        );
        return rows.length >= 6 ? rows : undefined;
      },
      { timeoutMs: 40_000, intervalMs: 250 },
    );
    const slots = runs.map((run) => run.slot);
    expect(new Set(slots).size).toBe(slots.length);
  }, 60_000);

  it("session mode: SIGKILL of the instance running a long task, and another re-runs it through its liveness lock long before the lock expires", async () => {
    const LONG_LOCK_MS = 30_000; // a takeover by lock expiry would take this long
    const peers = await cluster(
      ["k1", "k2"],
      [
        { name: "slow", cron: "0 0 0 1 1 *" },
        { name: "quick", enabled: false },
      ],
      { SLOW_TASK_MS: "60000", CRONWARDEN_LOCK_LIFETIME_MS: String(LONG_LOCK_MS) },
    );
    await suite.db.pool.query("UPDATE agenda_jobs SET next_run_at = now() WHERE name = 'slow'");
    const owner = await pollUntil("an instance to start the run", () =>
      peers.find((peer) => peer.find((line) => line.task === "slow" && line.msg === "run started")),
    );
    const slot = owner.find((line) => line.task === "slow" && line.msg === "run started")?.slot;
    await pollUntil("the run's start row", async () => {
      const { rows } = await suite.db.pool.query(`SELECT 1 FROM ${STARTS} WHERE job_name = 'slow'`);
      return rows.length > 0;
    });
    await owner.kill("SIGKILL");
    const survivor = peers.find((peer) => peer !== owner) as ServiceProcess;
    const rerun = await survivor.waitFor(
      "a re-run on the survivor",
      (line) => line.task === "slow" && /^run started: a re-run/.test(String(line.msg)),
      LONG_LOCK_MS / 2,
    );
    expect(rerun.slot).toBe(slot);
  }, 60_000);

  it("session mode: a job notification (LISTEN) wakes an instance long before its next poll", async () => {
    const POLL_MS = 60_000;
    const [peer] = await cluster(
      ["n1"],
      [
        { name: "slow", cron: "0 0 0 1 1 *" },
        { name: "quick", enabled: false },
      ],
      {
        SLOW_TASK_MS: "100",
        CRONWARDEN_MIN_INTERVAL_MS: String(POLL_MS),
        CRONWARDEN_PROCESS_EVERY_MS: String(POLL_MS),
      },
    );
    // the instance polled at its start; the next poll is a minute away. Due now, and said so on the
    // channel by a client connected to PostgreSQL directly:
    const { rows } = await suite.db.pool.query<{ id: string }>(
      "UPDATE agenda_jobs SET next_run_at = now() WHERE name = 'slow' RETURNING id::text AS id",
    );
    const channel = new JobNotificationChannel({ pool: suite.db.pool });
    channel.on("error", () => {});
    await channel.connect();
    try {
      await channel.publish({
        jobId: rows[0]?.id as never,
        jobName: "slow",
        nextRunAt: new Date(),
        priority: 0,
        timestamp: new Date(),
      });
    } finally {
      await channel.disconnect();
    }
    await (peer as ServiceProcess).waitFor(
      "the run the notification asked for",
      (line) => line.task === "slow" && /^run succeeded/.test(String(line.msg)),
      POLL_MS / 2,
    );
  }, 90_000);
});

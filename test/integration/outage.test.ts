import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import pg from "pg";
import { afterAll, beforeAll, expect, it } from "vitest";
import { createLogger } from "../../src/index.js";
import { type EmbeddedPostgres, startEmbeddedPostgres } from "../../src/infra/embeddedPostgres/index.js";
import { yamlOf } from "../helpers/harness.js";
import { ServiceProcess } from "../helpers/processes.js";

/**
 * PostgreSQL stops and comes back while the service runs. The test owns this server (not the
 * shared test server) so it can restart it.
 */

let dir: string;
let server: EmbeddedPostgres | undefined;
const logger = createLogger({ level: "warn" });

beforeAll(async () => {
  dir = await mkdtemp(path.join(tmpdir(), "cronwarden-outage-"));
});

afterAll(async () => {
  await server?.stop();
  await rm(dir, { recursive: true, force: true });
});

it("the service survives a PostgreSQL restart under load: one outage line, reconnects, resumes, nothing runs twice", async () => {
  const dataDir = path.join(dir, "pg");
  server = await startEmbeddedPostgres({ dataDir, logger });
  const port = server.port;
  const configFile = path.join(dir, "tasks.yaml");
  await writeFile(
    configFile,
    yamlOf([
      { name: "quick", cron: "* * * * * *" },
      { name: "slow", cron: "*/5 * * * * *" },
    ]),
  );
  const service = new ServiceProcess("test/fixtures/instance.ts", {
    DATABASE_URL: server.connectionString,
    CRONWARDEN_CONFIG_FILE: configFile,
    CRONWARDEN_MIN_INTERVAL_MS: "1000",
    CRONWARDEN_PROCESS_EVERY_MS: "500",
    CRONWARDEN_LOCK_LIFETIME_MS: "3000",
    SLOW_TASK_MS: "2000",
  });
  const succeeded = () =>
    service.lines.filter((line) => line.task === "quick" && /^run succeeded/.test(String(line.msg))).length;
  try {
    await service.waitFor("three quick runs", () => succeeded() >= 3);

    await server.stop();
    await service.waitFor(
      "the outage line",
      (line) => /^database unreachable/.test(String(line.msg)),
      20_000,
    );
    const runsBeforeRecovery = succeeded();
    await new Promise((resolve) => setTimeout(resolve, 4000)); // several polls and probes while it is down
    server = await startEmbeddedPostgres({ dataDir, port, logger });
    await service.waitFor(
      "the recovery line",
      (line) => /^database reachable again after \d+ s; runs resume$/.test(String(line.msg)),
      20_000,
    );
    await service.waitFor(
      "three runs after the recovery",
      () => succeeded() >= runsBeforeRecovery + 3,
      20_000,
    );

    expect(service.child.exitCode).toBeNull();
    const messages = service.messages();
    expect(messages.filter((msg) => /^database unreachable/.test(msg))).toHaveLength(1);
    expect(messages.filter((msg) => /unhandled/.test(msg))).toEqual([]);
    // Agenda's per-poll errors stay out of the error log while the outage line covers them
    const errorsDuringOutage = service.lines.filter(
      (line) => (line.level ?? 0) >= 50 && /^agenda: /.test(String(line.msg)),
    );
    expect(errorsDuringOutage.length).toBeLessThanOrEqual(2);

    // every run the process started, by its own log: each slot once (a run that ended during the
    // outage is not taken for a dead one and run again)
    const starts = service.lines
      .filter((line) => /^run started/.test(String(line.msg)))
      .map((line) => `${line.task}@${line.slot}`);
    expect(starts.length).toBeGreaterThan(6);
    if (starts.filter((start, index) => starts.indexOf(start) !== index).length)
      console.log(
        service.lines
          .filter((line) => line.task === "slow" || (line.level ?? 0) >= 40)
          .map(
            (line) =>
              `${line.time} ${line.level} ${line.task} ${line.slot} ${line.msg} ${JSON.stringify(line.err ?? "")}`,
          )
          .join("\n"),
      );
    expect(starts.filter((start, index) => starts.indexOf(start) !== index)).toEqual([]);

    const client = new pg.Client({ connectionString: server.connectionString });
    await client.connect();
    try {
      const { rows } = await client.query(
        `SELECT job_name, meta->>'scheduledAt' AS slot, count(*)::int AS n FROM agenda_logs
          WHERE event IN ('success', 'fail') GROUP BY 1, 2 HAVING count(*) > 1`,
      );
      expect(rows).toEqual([]); // no slot ran twice
    } finally {
      await client.end();
    }
  } finally {
    await service.kill();
  }
}, 120_000);

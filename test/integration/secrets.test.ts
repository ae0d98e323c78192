import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, expect, it } from "vitest";
import { createTestDatabase, type TestDatabase } from "../helpers/database.js";
import { yamlOf } from "../helpers/harness.js";
import { pollUntil } from "../helpers/poll.js";
import { ServiceProcess } from "../helpers/processes.js";

/**
 * Secrets never leave in clear, even when a task's own error message quotes them: the database
 * password, the admin token and the alert webhook URL are looked for in every log line, every
 * run-log row, every alert and the API's answers.
 */

const TOKEN = "secret-admin-token-5f3a9c2e71d4";
/** A task's own secret (docs/isolation.md, "Secrets"), quoted by its error. */
const TASK_SECRET = "task-secret-b81f4c09e2a7";
let db: TestDatabase;
let dir: string;
let hooks: Server;
const alerts: string[] = [];

beforeAll(async () => {
  db = await createTestDatabase();
  dir = await mkdtemp(path.join(tmpdir(), "cronwarden-secrets-"));
  hooks = createServer((request, response) => {
    let body = "";
    request.on("data", (chunk: Buffer) => {
      body += chunk.toString("utf8");
    });
    request.on("end", () => {
      alerts.push(`${request.url} ${body}`);
      response.end("ok");
    });
  });
  await new Promise<void>((resolve) => hooks.listen(0, "127.0.0.1", resolve));
});

afterAll(async () => {
  await new Promise((resolve) => hooks?.close(resolve));
  await db?.drop();
  await rm(dir, { recursive: true, force: true });
});

it("a task whose error quotes the database URL, the admin token, the webhook URL or its own task secret: none of them in logs, run rows, alerts or responses", async () => {
  const password = new URL(db.url).password;
  expect(password.length).toBeGreaterThanOrEqual(6); // the test server has a real password
  const webhook = `http://127.0.0.1:${(hooks.address() as AddressInfo).port}/services/T0001/B0002/hookSecretXYZ123`;
  const configFile = path.join(dir, "tasks.yaml");
  await writeFile(
    configFile,
    yamlOf([
      { name: "leaky", cron: "* * * * * *" },
      { name: "leaky-secret", cron: "* * * * * *" },
      { name: "quick", cron: "* * * * * *" },
    ]),
  );
  const service = new ServiceProcess("test/fixtures/instance.ts", {
    DATABASE_URL: db.url,
    CRONWARDEN_CONFIG_FILE: configFile,
    CRONWARDEN_MIN_INTERVAL_MS: "1000",
    CRONWARDEN_PROCESS_EVERY_MS: "500",
    CRONWARDEN_ADMIN_TOKEN: TOKEN,
    CRONWARDEN_ALERT_WEBHOOK_URL: webhook,
    CRONWARDEN_ALERT_SILENCE_MS: "0",
    LEAKY_TASK: "1",
    LEAKY_TASK_SECRET: TASK_SECRET,
  });
  try {
    const listening = await service.waitFor("the admin API", (line) =>
      /^admin API listening on/.test(String(line.msg)),
    );
    const url = String(listening.msg).replace(/^admin API listening on /, "");
    await pollUntil(
      "two failed runs recorded",
      async () => {
        const { rows } = await db.pool.query(
          "SELECT count(*)::int AS n FROM agenda_logs WHERE job_name = 'leaky' AND event = 'fail'",
        );
        return rows[0].n >= 2;
      },
      { timeoutMs: 20_000 },
    );
    await pollUntil(
      "a failed run of the task with a secret recorded",
      async () => {
        const { rows } = await db.pool.query(
          "SELECT count(*)::int AS n FROM agenda_logs WHERE job_name = 'leaky-secret' AND event = 'fail'",
        );
        return rows[0].n >= 1;
      },
      { timeoutMs: 20_000 },
    );
    await pollUntil("an alert", () => alerts.length > 0, { timeoutMs: 20_000 });
    await pollUntil("an alert of the task with a secret", () =>
      alerts.some((alert) => alert.includes("the API refused")),
    );

    const headers = { authorization: `Bearer ${TOKEN}` };
    const responses = await Promise.all(
      [
        "/tasks",
        "/tasks/leaky",
        "/tasks/leaky/runs?limit=5",
        "/config",
        "/metrics",
        "/tasks/leaky-secret/runs?limit=5",
      ].map(async (route) => (await fetch(`${url}${route}`, { headers })).text()),
    );
    const { rows } = await db.pool.query("SELECT row_to_json(l)::text AS row FROM agenda_logs l");
    const runRows = rows.map((row: { row: string }) => row.row);
    const logText = [...service.lines.map((line) => JSON.stringify(line)), ...service.stderr];

    // the error was recorded and reported, with the secrets masked
    expect(runRows.some((row) => row.includes("cannot connect to postgres") && row.includes("***"))).toBe(
      true,
    );
    expect(logText.some((line) => line.includes("run failed") && line.includes("cannot connect to"))).toBe(
      true,
    );
    expect(alerts.some((alert) => alert.includes("cannot connect to"))).toBe(true);
    expect(responses[2]).toContain("cannot connect to");
    expect(runRows.some((row) => row.includes("the API refused ***"))).toBe(true);
    expect(responses[5]).toContain("the API refused ***");

    const places = {
      logs: logText,
      runRows,
      alerts: alerts.map((alert) => alert.slice(alert.indexOf(" ") + 1)),
      responses,
    };
    for (const [where, texts] of Object.entries(places)) {
      for (const secret of [password, TOKEN, webhook, "hookSecretXYZ123", TASK_SECRET]) {
        const leaks = texts.filter((text) => text.includes(secret));
        expect({
          where,
          secret: `${secret.slice(0, 4)}...`,
          leaks: leaks.map((leak) => leak.slice(0, 300)),
        }).toEqual({
          where,
          secret: `${secret.slice(0, 4)}...`,
          leaks: [],
        });
      }
    }
  } finally {
    await service.kill();
  }
}, 90_000);

import { mkdtemp, rename, rm, writeFile } from "node:fs/promises";
import net from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loadServiceSettings, unknownVariables } from "../../src/serve/settings.js";
import { createTestDatabase, type TestDatabase } from "../helpers/database.js";
import { harnessSuite, pollUntil } from "../helpers/harness.js";
import { ServiceProcess } from "../helpers/processes.js";

describe("service settings", () => {
  it("a bad variable is named with its value and the rule", () => {
    expect(() => loadServiceSettings({ LOG_LEVEL: "verbose" })).toThrow(
      /LOG_LEVEL="verbose": must be one of fatal, error, warn, info, debug, trace, silent/,
    );
    expect(() => loadServiceSettings({ CRONWARDEN_TIMEZONE: "Mars/Base" })).toThrow(
      /CRONWARDEN_TIMEZONE="Mars\/Base": must be an IANA timezone name/,
    );
    expect(() => loadServiceSettings({ CRONWARDEN_DRAIN_TIMEOUT_MS: "soon" })).toThrow(
      /CRONWARDEN_DRAIN_TIMEOUT_MS="soon": must be a whole number/,
    );
    expect(() => loadServiceSettings({ CRONWARDEN_DB_STARTUP_TIMEOUT_MS: "-1" })).toThrow(
      /CRONWARDEN_DB_STARTUP_TIMEOUT_MS="-1": must be a whole number/,
    );
    // secrets are never echoed
    expect(() => loadServiceSettings({ DATABASE_URL: "mysql://u:hunter2@db/x" })).toThrow(
      /DATABASE_URL=\(hidden\): must be a postgres:\/\/ URL/,
    );
    expect(loadServiceSettings({ CRONWARDEN_TIMEZONE: "Asia/Shanghai", LOG_LEVEL: "warn" })).toMatchObject({
      CRONWARDEN_TIMEZONE: "Asia/Shanghai",
      LOG_LEVEL: "warn",
      CRONWARDEN_DB_STARTUP_TIMEOUT_MS: 300_000,
      CRONWARDEN_PG_IDLE_TIMEOUT_MS: 300_000,
    });
    expect(loadServiceSettings({ CRONWARDEN_PG_IDLE_TIMEOUT_MS: "0" }).CRONWARDEN_PG_IDLE_TIMEOUT_MS).toBe(0);
  });

  it("an unknown CRONWARDEN_* variable is reported with the closest known name", () => {
    expect(
      unknownVariables({
        CRONWARDEN_DRAIN_TIMEOUT: "5000",
        CRONWARDEN_ADMN_PORT: "1",
        CRONWARDEN_ADMIN_PORT: "2",
      }),
    ).toEqual([
      { name: "CRONWARDEN_ADMN_PORT", closest: "CRONWARDEN_ADMIN_PORT" },
      { name: "CRONWARDEN_DRAIN_TIMEOUT", closest: "CRONWARDEN_DRAIN_TIMEOUT_MS" },
    ]);
  });

  it("the service refuses LOG_LEVEL=verbose with one line naming it, not pino's stack", async () => {
    const service = new ServiceProcess("service/main.ts", {
      LOG_LEVEL: "verbose",
      CRONWARDEN_TIMEZONE: "Mars/Base",
      CRONWARDEN_MAX_CONCURENCY: "3",
    });
    expect(await service.exited).toEqual({ code: 1, signal: null });
    const fatal = service.find((line) => /^cronwarden could not start/.test(String(line.msg)));
    expect(fatal?.msg).toMatch(/LOG_LEVEL="verbose": must be one of/);
    expect(fatal?.msg).toMatch(/CRONWARDEN_TIMEZONE="Mars\/Base"/);
    expect(service.messages()).toContain(
      "unknown variable CRONWARDEN_MAX_CONCURENCY is ignored; did you mean CRONWARDEN_MAX_CONCURRENCY?",
    );
    expect(service.stderr.join("")).not.toMatch(/unknown level|at .*pino/);
  }, 60_000);
});

describe("a database down at start-up", () => {
  let db: TestDatabase;
  let dir: string;
  beforeAll(async () => {
    db = await createTestDatabase();
    dir = await mkdtemp(path.join(tmpdir(), "cronwarden-db-wait-"));
    await writeFile(
      path.join(dir, "tasks.yaml"),
      'tasks:\n  - { name: quick, enabled: true, cron: "* * * * * *" }\n',
    );
  });
  afterAll(async () => {
    await db?.drop();
    await rm(dir, { recursive: true, force: true });
  });

  it("is waited for with backoff, not ready meanwhile, and the service starts once it answers", async () => {
    // a port that refuses connections until the test starts forwarding it to the real database
    const target = new URL(db.url);
    const proxy = net.createServer((client) => {
      const upstream = net.connect(Number(target.port), target.hostname);
      client.pipe(upstream).pipe(client);
      client.on("error", () => upstream.destroy());
      upstream.on("error", () => client.destroy());
    });
    const port = await new Promise<number>((resolve) => {
      const probe = net.createServer().listen(0, "127.0.0.1", () => {
        const { port: free } = probe.address() as net.AddressInfo;
        probe.close(() => resolve(free));
      });
    });
    const proxied = new URL(db.url);
    proxied.hostname = "127.0.0.1";
    proxied.port = String(port);
    const service = new ServiceProcess("test/fixtures/instance.ts", {
      DATABASE_URL: proxied.toString(),
      CRONWARDEN_CONFIG_FILE: path.join(dir, "tasks.yaml"),
      CRONWARDEN_MIN_INTERVAL_MS: "1000",
      CRONWARDEN_DB_STARTUP_TIMEOUT_MS: "120000",
    });
    try {
      const waiting = await service.waitFor("the start-up retry line", (line) =>
        /^database unreachable at start-up/.test(String(line.msg)),
      );
      expect(waiting.msg).toMatch(/retrying with backoff for up to \d+ s more \(not ready meanwhile\)/);
      expect(JSON.stringify(service.lines)).not.toContain(new URL(db.url).password || "no-password-in-url");
      const admin = await service.waitFor("the admin API", (line) =>
        /^admin API listening/.test(String(line.msg)),
      );
      expect((await fetch(`${admin.url}/readyz`)).status).toBe(503);
      expect((await fetch(`${admin.url}/healthz`)).status).toBe(200);
      await new Promise<void>((resolve) => proxy.listen(port, "127.0.0.1", resolve));
      await service.waitFor(
        "the scheduler to start",
        (line) => /^scheduler started/.test(String(line.msg)),
        60_000,
      );
      await pollUntil("ready", async () => (await fetch(`${admin.url}/readyz`)).status === 200);
      service.child.kill("SIGTERM");
      expect(await service.exited).toEqual({ code: 0, signal: null });
    } finally {
      await service.kill();
      proxy.close();
    }
  }, 120_000);

  it("gives up after CRONWARDEN_DB_STARTUP_TIMEOUT_MS with a message naming it", async () => {
    const service = new ServiceProcess("test/fixtures/instance.ts", {
      DATABASE_URL: "postgres://nobody:secret-password@127.0.0.1:1/none",
      CRONWARDEN_CONFIG_FILE: path.join(dir, "tasks.yaml"),
      CRONWARDEN_DB_STARTUP_TIMEOUT_MS: "1500",
    });
    expect(await service.exited).toEqual({ code: 1, signal: null });
    const fatal = service.find((line) => /^cronwarden could not start/.test(String(line.msg)));
    expect(fatal?.msg).toMatch(
      /unreachable .* after \d+ attempts over 2 s; .*raise CRONWARDEN_DB_STARTUP_TIMEOUT_MS/,
    );
    expect(JSON.stringify(service.lines)).not.toContain("secret-password");
  }, 60_000);
});

describe("a config source that keeps failing", () => {
  const suite = harnessSuite();

  it("is logged once per state change, not per watch event", async () => {
    const harness = await suite.start([{ name: "steady", handler: async () => {} }], [{ name: "steady" }]);
    const broken = async () => {
      const temporary = `${harness.configPath}.tmp`;
      await writeFile(temporary, "tasks: [unclosed\n");
      await rename(temporary, harness.configPath);
    };
    const stillFailing = () =>
      harness.logs.lines.filter((line) => /^still failing/.test(String(line.msg))).length;
    await broken();
    await harness.logs.waitFor("the parse error", (line) => /cannot be parsed/.test(String(line.msg)));
    for (let round = 1; round <= 3; round++) {
      await broken();
      await pollUntil(`repeat ${round} seen`, () => stillFailing() >= round);
    }
    const errors = harness.logs.lines.filter(
      (line) => line.level === 50 && /cannot be parsed/.test(String(line.msg)),
    );
    expect(errors).toHaveLength(1);
    await harness.writeConfig([{ name: "steady", cron: "*/2 * * * * *" }]);
    await harness.logs.waitFor("the recovery line", (line) => line.msg === "config source readable again");
  });
});

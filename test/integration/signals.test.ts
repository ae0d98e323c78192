import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, expect, it } from "vitest";
import { createTestDatabase, type TestDatabase } from "../helpers/database.js";
import { descendantsOf, isAlive, ServiceProcess } from "../helpers/processes.js";

/**
 * SIGTERM reaches the process that drains, however the service was started: `npm start` (npm
 * forwards it to its child: the start script execs node, so no shell sits in between) and
 * `cronwarden serve`. The container's CMD is tested in deployment.test.ts.
 */

let db: TestDatabase;
let dir: string;
let configFile: string;

beforeAll(async () => {
  db = await createTestDatabase();
  dir = await mkdtemp(path.join(tmpdir(), "cronwarden-signals-"));
  configFile = path.join(dir, "tasks.yaml");
  await writeFile(
    configFile,
    [
      "tasks:",
      '  - { name: heartbeat, enabled: true, cron: "* * * * * *" }',
      '  - { name: reportRollup, enabled: false, cron: "*/5 * * * *" }',
      '  - { name: tick, enabled: true, cron: "* * * * * *" }',
      "",
    ].join("\n"),
  );
  // a company's own task module, compiled JavaScript, outside this repository
  await writeFile(
    path.join(dir, "tasks.mjs"),
    [
      "export function registerTasks(registrar) {",
      '  registrar.register({ name: "tick", handler: async (ctx) => ctx.logger.info("tick") });',
      "}",
      "",
    ].join("\n"),
  );
});

afterAll(async () => {
  await db?.drop();
  await rm(dir, { recursive: true, force: true });
});

const environment = () => ({
  DATABASE_URL: db.url,
  CRONWARDEN_CONFIG_FILE: configFile,
  CRONWARDEN_MIN_INTERVAL_MS: "1000",
  CRONWARDEN_PROCESS_EVERY_MS: "500",
  LOG_LEVEL: "info",
});

async function expectDrainOnSigterm(service: ServiceProcess, task: string): Promise<void> {
  let descendants: number[] = [];
  try {
    await service.waitFor(
      "the scheduler to start",
      (line) => /^scheduler started/.test(String(line.msg)),
      60_000,
    );
    await service.waitFor(
      `a ${task} run`,
      (line) => line.task === task && /^run succeeded/.test(String(line.msg)),
      30_000,
    );
    const pid = service.child.pid as number;
    descendants = descendantsOf(pid);
    service.child.kill("SIGTERM");
    expect(await service.exited).toEqual({ code: 0, signal: null });
    const messages = service.messages();
    expect(messages.some((msg) => /^SIGTERM received: shutting down/.test(msg))).toBe(true);
    expect(messages.some((msg) => /^stopped/.test(msg))).toBe(true);
    // nothing it started is left running
    const orphans = descendants.filter(isAlive);
    expect(orphans, `orphans of ${pid}: ${orphans.join(", ")}`).toEqual([]);
  } finally {
    await service.kill();
    // a failed run of this test must not leave its orphans behind either
    for (const orphan of descendants.filter(isAlive)) process.kill(orphan, "SIGKILL");
  }
}

it("SIGTERM to the pid of `npm start` drains the service and exits 0, leaving no orphan", async () => {
  const service = new ServiceProcess({ command: "npm", args: ["start", "--silent"] }, environment());
  await expectDrainOnSigterm(service, "heartbeat");
}, 120_000);

it("`cronwarden serve --tasks <module> --config <file>` runs a company's tasks and drains on SIGTERM", async () => {
  const service = new ServiceProcess(
    {
      command: process.execPath,
      args: [
        path.resolve("bin/cronwarden.mjs"),
        "serve",
        "--tasks",
        "./tasks.mjs",
        "--config",
        "./tasks.yaml",
      ],
      cwd: dir,
    },
    { ...environment(), CRONWARDEN_CONFIG_FILE: "" },
  );
  await expectDrainOnSigterm(service, "tick");
  // the admin API came with it
  expect(service.messages().some((msg) => /^admin API listening on/.test(msg))).toBe(true);
}, 120_000);

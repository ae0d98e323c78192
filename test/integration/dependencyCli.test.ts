import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, expect, it } from "vitest";
import { runCli } from "../../src/cli/main.js";
import { createTestDatabase, type TestDatabase } from "../helpers/database.js";
import { yamlOf } from "../helpers/harness.js";

/** `cronwarden validate` and `plan` show the dependency graph and each rejected link with its chain. */

let db: TestDatabase;
let dir: string;

beforeAll(async () => {
  db = await createTestDatabase();
  dir = await mkdtemp(path.join(tmpdir(), "cronwarden-depcli-"));
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

const config = yamlOf([
  { name: "extract", cron: "0 2 * * *", timezone: "Asia/Shanghai" },
  { name: "report", after: ["extract"], waitAtMost: "3h" },
  { name: "loopA", after: ["loopB"] },
  { name: "loopB", after: ["loopA"] },
  { name: "late", after: ["ghost"] },
]);

it("validate: the valid graph is shown, each rejected link alone with its chain, exit 1", async () => {
  const file = path.join(dir, "tasks.yaml");
  await writeFile(file, config);
  const result = await cli("validate", file, "--tasks", "extract,report,loopA,loopB,late,ghost");
  expect(result.code).toBe(1);
  expect(result.err).toEqual([
    expect.stringMatching(
      /^invalid: config tasks\[2\] "loopA": after \["loopB"\] is invalid: cycle loopA -> loopB -> loopA/,
    ),
    expect.stringMatching(
      /^invalid: config tasks\[3\] "loopB": after \["loopA"\] is invalid: cycle loopB -> loopA -> loopB/,
    ),
    expect.stringMatching(
      /^invalid: config tasks\[4\] "late": after \["ghost"\] is invalid: upstream "ghost" is not in the config/,
    ),
  ]);
  expect(result.out).toContain("dependency graph:");
  expect(result.out).toContain(
    '  report: after [extract] when allSucceeded, waitAtMost 3h; runs for the slots of "0 2 * * *" (Asia/Shanghai)',
  );
  expect(result.out).toContainEqual(expect.stringMatching(/: 2 valid entries, 3 rejected/));
});

it("validate with the registered names: an unregistered upstream rejects its downstream", async () => {
  const file = path.join(dir, "unregistered.yaml");
  await writeFile(
    file,
    yamlOf([
      { name: "extract", cron: "0 2 * * *" },
      { name: "report", after: ["extract"] },
    ]),
  );
  const result = await cli("validate", file, "--tasks", "report");
  expect(result.code).toBe(1);
  expect(result.err).toEqual([
    'invalid: config entry "extract": no task of that name is registered in code',
    expect.stringMatching(
      /^invalid: config entry "report": after upstream "extract" is not registered in code/,
    ),
  ]);
  expect(result.out).not.toContain("dependency graph:");
});

it("plan: a downstream is created with its dependency, and the graph is shown", async () => {
  const file = path.join(dir, "plan.yaml");
  await writeFile(
    file,
    yamlOf([
      { name: "extract", cron: "0 2 * * *" },
      { name: "report", after: ["extract"] },
    ]),
  );
  const result = await cli("plan", file, "--tasks", "extract,report");
  expect(result.code).toBe(0);
  expect(result.out).toContainEqual(
    expect.stringMatching(/^create\s+report\s+after \[extract\] when allSucceeded, enabled/),
  );
  expect(result.out).toContain(
    '  report: after [extract] when allSucceeded; runs for the slots of "0 2 * * *" (UTC)',
  );
});

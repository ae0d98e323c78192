import { createHash } from "node:crypto";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { HistoryRun } from "../../src/status/runHistory.js";
import { harnessSuite, pollUntil, type SchedulerHarness } from "../helpers/harness.js";

/**
 * Tasks whose handler is a module run in a worker thread or a child process (docs/isolation.md):
 * the same ctx, their log lines and return value in the run record, a hard end at timeout plus
 * grace, only their own secrets, every secret redacted. Real PostgreSQL, one in-process scheduler.
 */

const suite = harnessSuite();
const fixture = (name: string) => new URL(`../fixtures/isolation/${name}.mjs`, import.meta.url);
const TOKEN = "task-token-7c1e9b52aa04";
const ROTATED = "task-token-rotated-3f5d8e61";
const OTHER = "other-task-token-91bb2d40c6";
let secretsDir: string;
let harness: SchedulerHarness;

async function records(task: string, limit = 50): Promise<HistoryRun[]> {
  return (await harness.scheduler.runHistory({ task, limit })).runs;
}

/** The first record of the task that the predicate accepts, polled from the database. */
function recordOf(task: string, what: string, accept: (run: HistoryRun) => boolean, timeoutMs = 30_000) {
  return pollUntil(what, async () => (await records(task)).find(accept), { timeoutMs, intervalMs: 200 });
}

beforeAll(async () => {
  secretsDir = await mkdtemp(path.join(tmpdir(), "cronwarden-secrets-dir-"));
  await writeFile(path.join(secretsDir, "TASK_TOKEN"), `${TOKEN}\n`);
  // the service's own environment, which no isolated handler may see
  process.env.CRONWARDEN_SECRETS_DIR = secretsDir;
  process.env.DATABASE_URL = suite.db().url;
  process.env.CRONWARDEN_ADMIN_TOKEN = "admin-token-never-in-a-handler";
  process.env.OTHER_TOKEN = OTHER;
  const spin = { module: fixture("spin"), timeoutMs: 1000, retry: { maxRetries: 1, delayMs: 0 } };
  harness = await suite.start(
    [
      { name: "echo-worker", isolation: "worker", module: fixture("echo") },
      { name: "echo-process", isolation: "process", module: fixture("echo") },
      { name: "spin-worker", isolation: "worker", ...spin },
      { name: "spin-process", isolation: "process", ...spin },
      { name: "exit-worker", isolation: "worker", module: fixture("exit") },
      { name: "env-worker", isolation: "worker", module: fixture("env"), secrets: ["TASK_TOKEN"] },
      { name: "env-process", isolation: "process", module: fixture("env"), secrets: ["TASK_TOKEN"] },
      { name: "other", handler: () => {}, secrets: ["OTHER_TOKEN"] },
      { name: "leak-worker", isolation: "worker", module: fixture("leak"), secrets: ["TASK_TOKEN"] },
      { name: "leak-none", module: fixture("leak"), secrets: ["TASK_TOKEN"] },
      // the config lowers these limits, or tries to raise them
      { name: "lowered-timeout", isolation: "worker", module: fixture("spin"), timeoutMs: 60_000 },
      { name: "lowered-memory", isolation: "worker", module: fixture("hog"), memoryLimitMb: 256 },
      { name: "raised", handler: () => {}, timeoutMs: 60_000 },
      {
        name: "lowered-none",
        timeoutMs: 60_000,
        handler: (context) =>
          new Promise((_resolve, reject) =>
            context.signal.addEventListener("abort", () => reject(context.signal.reason), { once: true }),
          ),
      },
    ],
    [
      { name: "echo-worker" },
      { name: "echo-process" },
      { name: "spin-worker" },
      { name: "spin-process" },
      { name: "exit-worker", cron: "*/5 * * * * *" },
      { name: "env-worker" },
      { name: "env-process" },
      { name: "other" },
      { name: "leak-worker", cron: "*/2 * * * * *" },
      { name: "leak-none", cron: "*/2 * * * * *" },
      { name: "lowered-timeout", timeout: "1s" },
      { name: "lowered-memory", cron: "*/5 * * * * *", memoryLimit: "64MB" },
      { name: "raised", timeout: "2m", memoryLimit: "64MB" },
      { name: "lowered-none", cron: "*/3 * * * * *", timeout: "1s" },
    ],
    { timeoutGraceMs: 1000, maxConcurrency: 20 },
  );
}, 60_000);

afterAll(async () => {
  await harness?.stop();
  await rm(secretsDir, { recursive: true, force: true });
  for (const name of ["CRONWARDEN_SECRETS_DIR", "DATABASE_URL", "CRONWARDEN_ADMIN_TOKEN", "OTHER_TOKEN"])
    delete process.env[name];
});

describe.each([
  ["worker", "echo-worker"],
  ["process", "echo-process"],
])("isolation %s", (mode, task) => {
  it("gives the handler its context, keeps its log lines and its return value in the run record", async () => {
    const run = await recordOf(task, "a succeeded run", (each) => each.outcome === "succeeded");
    const detail = await harness.scheduler.runDetail(run.id);
    const messages = detail?.logs.map((line) => line.msg) ?? [];
    expect(messages).toEqual(
      expect.arrayContaining([
        `echo says hello from ${task}`,
        "inner line",
        "console line 42",
        "handler returned",
      ]),
    );
    expect(detail?.logs.find((line) => line.msg === "inner line")).toMatchObject({ level: "warn" });
    const returned = detail?.logs.find((line) => line.msg === "handler returned");
    const result = JSON.parse(returned?.data ?? "{}").result;
    expect(result).toMatchObject({
      taskName: task,
      scheduledAt: run.scheduledAt.toISOString(),
      attempt: 1,
      runKey: `${task}@${run.scheduledAt.toISOString()}`,
      trigger: "schedule",
      instanceId: harness.scheduler.instanceId,
      upstreams: [],
      aborted: false,
    });
    // a worker thread shares the process; a child process has its own
    if (mode === "worker") expect(result).toMatchObject({ mainThread: false, pid: process.pid });
    else expect(result.pid).not.toBe(process.pid);
  });
});

describe.each([
  ["worker", "spin-worker", "its worker thread was terminated"],
  ["process", "spin-process", "its child process was killed"],
])("isolation %s, a handler that ignores its signal", (_mode, task, how) => {
  it("is ended at timeout plus grace, recorded failed `timeout (terminated)`, retried, and the next slot runs", async () => {
    const isTerminated = (run: HistoryRun) =>
      run.outcome === "failed" && /^timeout \(terminated\)/.test(run.error ?? "");
    // two slots, each with both attempts (the retry policy applies to a terminated run)
    const runs = await pollUntil(
      "two slots whose final attempt was terminated",
      async () => {
        const all = (await records(task)).filter(isTerminated);
        const slots = new Set(
          all.filter((run) => run.final && run.attempt === 2).map((run) => run.scheduledAt.getTime()),
        );
        return slots.size >= 2 ? all : undefined;
      },
      { timeoutMs: 40_000, intervalMs: 250 },
    );
    for (const run of runs) {
      expect(run.error).toBe(
        `timeout (terminated): timed out after 1 s and did not stop within 1 s of grace; ${how}`,
      );
      // ended by the host's timers, not before: timeout (1 s) plus grace (1 s)
      expect(run.durationMs ?? 0).toBeGreaterThanOrEqual(1990);
    }
    expect(runs.some((run) => run.attempt === 1 && !run.final)).toBe(true);
  });
});

it("a worker that exits fails its run with the exit code, and the instance keeps running", async () => {
  const run = await recordOf("exit-worker", "a failed run", (each) => each.outcome === "failed");
  expect(run.error).toBe("worker thread exited with code 1");
  const before = run.finishedAt.getTime();
  await recordOf("echo-worker", "a run after the exit", (each) => each.finishedAt.getTime() > before);
});

describe.each([["env-worker"], ["env-process"]])("secrets, %s", (task) => {
  it("the handler's process.env holds its own secret and nothing else of the service's environment", async () => {
    const digest = (value: string) => createHash("sha256").update(value).digest("hex");
    const run = await recordOf(task, "a succeeded run", (each) => each.outcome === "succeeded");
    const detail = await harness.scheduler.runDetail(run.id);
    const printed = detail?.logs.find((line) => line.msg.startsWith("{"));
    // the printed environment: one variable, its value (the secret) redacted in the record
    expect(JSON.parse(printed?.msg ?? "null")).toEqual({ TASK_TOKEN: "***" });
    const returned = detail?.logs.find((line) => line.msg === "handler returned");
    expect(JSON.parse(returned?.data ?? "{}").result).toEqual({
      names: ["TASK_TOKEN"],
      matches: true,
      digest: digest(TOKEN),
    });
    expect(JSON.stringify(detail)).not.toContain(TOKEN);
  });
});

it("a rotated secret file is read by the next run, without a restart", async () => {
  const digest = createHash("sha256").update(ROTATED).digest("hex");
  const rotatedAt = Date.now();
  await writeFile(path.join(secretsDir, "TASK_TOKEN"), ROTATED);
  try {
    await pollUntil(
      "a run with the rotated secret",
      async () => {
        for (const run of await records("env-worker", 10)) {
          if (run.outcome !== "succeeded" || run.finishedAt.getTime() < rotatedAt) continue;
          const detail = await harness.scheduler.runDetail(run.id);
          const returned = detail?.logs.find((line) => line.msg === "handler returned");
          if (JSON.parse(returned?.data ?? "{}").result?.digest === digest) return true;
        }
        return false;
      },
      { timeoutMs: 20_000, intervalMs: 250 },
    );
  } finally {
    await writeFile(path.join(secretsDir, "TASK_TOKEN"), TOKEN);
  }
});

describe.each([["leak-worker"], ["leak-none"]])("redaction, %s", (task) => {
  it("the secret is redacted in the run record's error, its log lines and the instance's log", async () => {
    const run = await recordOf(task, "a failed run", (each) => each.outcome === "failed");
    expect(run.error).toBe("the API refused token ***");
    const detail = await harness.scheduler.runDetail(run.id);
    expect(detail?.logs.map((line) => line.msg)).toContain("calling the API with ***");
    expect(JSON.stringify(detail)).not.toContain(TOKEN);
    expect(JSON.stringify(harness.logs.lines)).not.toContain(TOKEN);
    expect(harness.logs.lines.some((line) => String(line.msg).includes("the API refused token ***"))).toBe(
      true,
    );
  });
});

describe("limits from the config", () => {
  it("a config entry lowers an isolated task's timeout: terminated at the config's, not the code's", async () => {
    const run = await recordOf("lowered-timeout", "a terminated run", (each) => each.outcome === "failed");
    expect(run.error).toBe(
      "timeout (terminated): timed out after 1 s and did not stop within 1 s of grace; its worker thread was terminated",
    );
  });

  it("a config entry lowers an in-process task's timeout", async () => {
    const run = await recordOf("lowered-none", "a timed-out run", (each) => each.outcome === "failed");
    expect(run.error).toBe("timed out after 1 s");
  });

  it("a config entry lowers an isolated task's heap limit", async () => {
    const run = await recordOf("lowered-memory", "a failed run", (each) => each.outcome === "failed");
    expect(run.error).toBe("worker thread memory limit 64 MB exceeded");
  });

  it("a config entry that would raise a limit is refused with the field, the value and the bound; the task keeps the code's", async () => {
    const line = await harness.logs.waitFor("the refusal", (each) =>
      String(each.msg).startsWith('config entry "raised"'),
    );
    expect(line.msg).toBe(
      'config entry "raised": timeout 2m is above the task\'s timeoutMs set in code (1m); the config may only lower it: raise timeoutMs in the registration to allow more; memoryLimit 64MB applies to a task with isolation "worker" or "process" only (an in-process handler shares the scheduler\'s heap); remove it; the task keeps its limits (timeout 1m)',
    );
    // its schedule was applied all the same: it runs
    await recordOf("raised", "a succeeded run", (each) => each.outcome === "succeeded");
  });
});

import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type AdminServer, createAdminServer } from "../../src/admin/index.js";
import { runCli } from "../../src/cli/main.js";
import type { RunStartedEvent } from "../../src/index.js";
import { createTestDatabase, type TestDatabase } from "../helpers/database.js";
import { pollUntil, SchedulerHarness } from "../helpers/harness.js";
import { LogCapture } from "../helpers/logs.js";

/** `cronwarden status | runs | run` against a live admin server (in-process CLI, real HTTP). */

const TOKEN = "cli-admin-token-0123456789abcdef";

let db: TestDatabase;
let harness: SchedulerHarness;
let server: AdminServer;
let url = "";
let releaseHold: () => void = () => {};
const started: RunStartedEvent[] = [];

beforeAll(async () => {
  db = await createTestDatabase();
  harness = await SchedulerHarness.start(
    db.pool,
    [
      { name: "cli-ok", handler: async () => {} },
      {
        name: "cli-fail",
        handler: async () => {
          throw new Error("upstream said no\nsecond line");
        },
      },
      {
        name: "cli-hold",
        handler: () =>
          new Promise<void>((resolve) => {
            releaseHold = resolve;
          }),
      },
    ],
    [{ name: "cli-ok" }, { name: "cli-fail" }, { name: "cli-hold", cron: "0 0 0 1 1 *" }],
    { missedSlotCheckMs: 0, missedSlotGraceMs: 1000 },
  );
  harness.scheduler.on("run:started", (event) => started.push(event));
  server = createAdminServer({
    scheduler: harness.scheduler,
    port: 0,
    token: TOKEN,
    logger: new LogCapture().logger,
  });
  url = (await server.listen()).url;
  await Promise.all([harness.runsOf("cli-ok", 2), harness.runsOf("cli-fail", 1)]);
});

afterAll(async () => {
  releaseHold();
  await server?.close();
  await harness?.stop();
  await db?.drop();
});

async function cli(
  argv: string[],
  env: NodeJS.ProcessEnv = { CRONWARDEN_ADMIN_URL: url, CRONWARDEN_ADMIN_TOKEN: TOKEN },
) {
  const out: string[] = [];
  const err: string[] = [];
  const code = await runCli(argv, {
    out: (line) => out.push(line),
    err: (line) => err.push(line),
    env,
    cwd: process.cwd(),
  });
  return { code, out, err };
}

describe("cronwarden status", () => {
  it("prints a table and exits 3 while an enabled task's last run failed", async () => {
    const result = await pollUntil("cli-fail's failure in the status", async () => {
      const attempt = await cli(["status"]);
      return attempt.code === 3 ? attempt : undefined;
    });
    expect(result.err).toEqual([]);
    expect(result.out[0]).toMatch(
      /^TASK\s+ENABLED\s+SCHEDULE\s+NEXT RUN\s+LAST RUN\s+OUTCOME\s+FAILED SLOTS\s+RUNNING\s+NOTE$/,
    );
    const row = (name: string) => result.out.find((line) => line.startsWith(`${name} `)) ?? "";
    expect(row("cli-ok")).toMatch(
      /^cli-ok\s+yes\s+\* \* \* \* \* \* \(UTC\)\s+\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\s+\S+Z\s+succeeded\s+0\s+(?:-|on \S+)\s+-$/,
    );
    // RUNNING is "-" or "on <instance>" (a run may be in progress right now)
    expect(row("cli-fail")).toMatch(/\sfailed\s+\d+\s+(?:-|on \S+)\s+upstream said no second line$/);
    expect(row("cli-hold")).toMatch(/^cli-hold\s+yes\s+0 0 0 1 1 \* \(UTC\)/);
    expect(result.out.at(-1)).toBe("1 task(s) need attention: cli-fail (last run failed)");
  });

  it("exits 0 when nothing enabled is in trouble (the failing task disabled)", async () => {
    await harness.writeConfig([
      { name: "cli-ok" },
      { name: "cli-fail", enabled: false },
      { name: "cli-hold", cron: "0 0 0 1 1 *" },
    ]);
    const result = await cli(["status", "--url", url]);
    expect(result.code).toBe(0);
    expect(result.out.at(-1)).toBe("3 task(s), none needs attention");
  });

  it("exits 3 when a missed slot is reported, until the task runs again", async () => {
    // the workers may lock the overdue job before the check sees it (then it is not missed):
    // let that run finish and try again
    for (let attempt = 1; ; attempt++) {
      await db.pool.query(
        "UPDATE agenda_jobs SET next_run_at = date_trunc('second', now()) - interval '10 minutes' WHERE name = 'cli-hold'",
      );
      const missed = await harness.scheduler.checkMissedSlots();
      if (missed.some((slot) => slot.taskName === "cli-hold") || attempt >= 5) break;
      await pollUntil("the early run of cli-hold", () =>
        started.some((event) => event.taskName === "cli-hold"),
      );
      const finished = harness.runsOf("cli-hold", 1);
      releaseHold();
      await finished;
      await pollUntil("the end of that run saved", async () => {
        const { rows } = await db.pool.query("SELECT locked_at FROM agenda_jobs WHERE name = 'cli-hold'");
        return rows[0]?.locked_at === null;
      });
      started.splice(0, started.length, ...started.filter((event) => event.taskName !== "cli-hold"));
    }
    const result = await cli(["status"]);
    expect(result.code).toBe(3);
    expect(result.out.at(-1)).toMatch(/^1 task\(s\) need attention: cli-hold \(missed slot \S+Z\)$/);
    // the detector nudges the workers: the overdue slot's catch-up run starts; the report stays
    // until that run has finished (cli-hold holds its run until released)
    await pollUntil("cli-hold's catch-up run", () => started.some((event) => event.taskName === "cli-hold"));
    expect((await cli(["status"])).code).toBe(3);
    const finished = harness.runsOf("cli-hold", 1);
    releaseHold();
    await finished;
    await pollUntil("the report cleared", async () => (await cli(["status"])).code === 0);
  });
});

describe("cronwarden runs", () => {
  it("lists the last N runs of a task", async () => {
    const result = await cli(["runs", "cli-ok", "--limit", "2"]);
    expect(result).toMatchObject({ code: 0, err: [] });
    expect(result.out[0]).toMatch(
      /^SCHEDULED\s+STARTED\s+DURATION\s+OUTCOME\s+TRIGGER\s+ATTEMPT\s+INSTANCE\s+ERROR$/,
    );
    expect(result.out.slice(1, 3)).toEqual([
      expect.stringMatching(/^\S+Z\s+\S+Z\s+\d+ ms\s+succeeded\s+schedule\s+1\s+\S+$/),
      expect.stringMatching(/succeeded/),
    ]);
    expect(result.out.at(-1)).toBe("2 run(s) of cli-ok");
  });

  it("exits 1 for an unknown task and 2 for a bad limit", async () => {
    const unknown = await cli(["runs", "nope"]);
    expect(unknown.code).toBe(1);
    expect(unknown.err[0]).toMatch(/^cronwarden runs: no task named "nope"/);
    expect((await cli(["runs", "cli-ok", "--limit", "0"])).code).toBe(2);
  });
});

describe("cronwarden run", () => {
  it("queues a run (exit 0); refused while running, disabled or unknown (exit 1)", async () => {
    // what run-now checks: the job row unlocked (its last run's end saved)
    await pollUntil("cli-hold unlocked", async () => {
      const { rows } = await db.pool.query("SELECT locked_at FROM agenda_jobs WHERE name = 'cli-hold'");
      return rows[0]?.locked_at === null;
    });
    const before = started.length;
    const queued = await cli(["run", "cli-hold"]);
    expect(queued).toMatchObject({ code: 0, err: [] });
    expect(queued.out[0]).toMatch(/^queued a run of cli-hold \(requested \S+Z by admin\)$/);
    await pollUntil("the manual run", () =>
      started.slice(before).some((event) => event.taskName === "cli-hold" && event.trigger === "manual"),
    );
    const busy = await cli(["run", "cli-hold"]);
    expect(busy.code).toBe(1);
    expect(busy.err[0]).toMatch(/^cronwarden run: cannot run "cli-hold" now: "cli-hold" is running now/);
    releaseHold();
    expect((await cli(["run", "cli-fail"])).code).toBe(1); // disabled above
    expect((await cli(["run", "nope"])).code).toBe(1);
  });

  it("exits 2 without a token (401) and when the API is unreachable", async () => {
    const anonymous = await cli(["run", "cli-ok"], { CRONWARDEN_ADMIN_URL: url });
    expect(anonymous.code).toBe(2);
    expect(anonymous.err[0]).toMatch(/missing bearer token.*\(pass --token or set CRONWARDEN_ADMIN_TOKEN\)$/);
    const probe = createServer();
    await new Promise<void>((resolve) => probe.listen(0, "127.0.0.1", resolve));
    const { port } = probe.address() as AddressInfo;
    await new Promise((resolve) => probe.close(resolve));
    const unreachable = await cli(["status", "--url", `http://127.0.0.1:${port}`]);
    expect(unreachable.code).toBe(2);
    expect(unreachable.err[0]).toBe(
      `cronwarden status: cannot reach the admin API at http://127.0.0.1:${port}: ECONNREFUSED`,
    );
    expect((await cli(["run"])).err[0]).toMatch(/^cronwarden run: run needs <task>: a task name/);
  });
});

/** A table's rows as cells, cut at the header's column starts (columns are padded to one width). */
function cells(lines: string[]): Array<Record<string, string>> {
  const [header = "", ...rows] = lines;
  const columns = [...header.matchAll(/\S+(?: \S+)*/g)].map((match) => ({
    name: match[0],
    start: match.index ?? 0,
  }));
  return rows.map((row) =>
    Object.fromEntries(
      columns.map((column, at) => [column.name, row.slice(column.start, columns[at + 1]?.start).trim()]),
    ),
  );
}

// biome-ignore lint/suspicious/noExplicitAny: parsed --json output, walked by the assertions below
type Json = Record<string, any>;

const shortTime = (iso: unknown) => (typeof iso === "string" ? iso.replace(/\.\d{3}Z$/, "Z") : "-");

describe("--json", () => {
  it("status --json: every field of the table (the task's state among them) and the same exit code", async () => {
    // stable rows: cli-fail is disabled and cli-hold's yearly slot is far (cli-ok runs every second);
    // a record that lands between the two reads (a run of cli-fail claimed before it was disabled)
    // changes the rows: the pair is taken when the table is the same before and after the JSON
    const { text, json } = await pollUntil("a status table unchanged around its --json read", async () => {
      const before = await cli(["status"]);
      const read = await cli(["status", "--json"]);
      const after = await cli(["status"]);
      const stable = (lines: string[]) => lines.filter((line) => /^cli-(fail|hold) /.test(line)).join("\n");
      return stable(before.out) === stable(after.out) ? { text: before, json: read } : undefined;
    });
    expect(json.err).toEqual([]);
    expect(json.code).toBe(text.code);
    const tasks = JSON.parse(json.out.join("\n")) as Json[];
    const rows = cells(text.out.slice(0, -1));
    expect(tasks.map((task) => task.name)).toEqual(rows.map((row) => row.TASK));
    for (const name of ["cli-fail", "cli-hold"]) {
      const row = rows.find((candidate) => candidate.TASK === name) ?? {};
      const task = tasks.find((candidate) => candidate.name === name) ?? ({} as Json);
      expect(task.state, name).toBe(name === "cli-fail" ? "disabled" : "enabled");
      expect({
        ENABLED: { enabled: "yes", disabled: "no", paused: "paused" }[task.state as string],
        SCHEDULE: `${task.job.cron} (${task.job.timezone})`,
        "NEXT RUN": shortTime(task.job.nextRunAt),
        "LAST RUN": shortTime(task.job.lastRunAt),
        OUTCOME: task.lastOutcome ?? "-",
        "FAILED SLOTS": String(task.consecutiveFailures),
        RUNNING: task.running ? `on ${task.runningOn}` : "-",
      }).toEqual({ ...row, TASK: undefined, NOTE: undefined });
      // the NOTE's sources: the last error, registration, a pause, a missed slot
      if (row.NOTE !== "-") expect(row.NOTE).toBe((task.lastError as string).replace(/\s+/g, " "));
      expect(task).toMatchObject({ registered: true, attention: null });
    }
    expect(tasks.every((task) => "attention" in task && "missedSlot" in task)).toBe(true);
  });

  it("runs --json: every field of the table and each run's id (for GET /runs/:id)", async () => {
    const text = await cli(["runs", "cli-fail", "--limit", "2"]);
    const json = await cli(["runs", "cli-fail", "--limit", "2", "--json"]);
    expect(json).toMatchObject({ code: 0, err: [] });
    const runs = JSON.parse(json.out.join("\n")) as Json[];
    const rows = cells(text.out.slice(0, -1));
    expect(runs).toHaveLength(rows.length);
    expect(runs.length).toBeGreaterThan(0);
    runs.forEach((run, at) => {
      expect(run.id).toMatch(/^[0-9a-f-]{36}$/);
      expect({
        SCHEDULED: shortTime(run.scheduledAt),
        STARTED: shortTime(run.startedAt),
        DURATION: `${run.durationMs} ms`,
        OUTCOME: run.outcome,
        TRIGGER: run.trigger,
        ATTEMPT: String(run.attempt),
        INSTANCE: run.instanceId,
        ERROR: (run.error as string).replace(/\s+/g, " "),
      }).toEqual(rows[at]);
    });
    const detail = await fetch(`${url}/runs/${runs[0]?.id}`, {
      headers: { authorization: `Bearer ${TOKEN}` },
    });
    expect(detail.status).toBe(200);
  });

  it("run --json prints the API's answer", async () => {
    await pollUntil("cli-hold unlocked", async () => {
      const { rows } = await db.pool.query("SELECT locked_at FROM agenda_jobs WHERE name = 'cli-hold'");
      return rows[0]?.locked_at === null;
    });
    const before = started.length;
    const json = await cli(["run", "cli-hold", "--json"]);
    expect(json).toMatchObject({ code: 0, err: [] });
    const answer = JSON.parse(json.out.join("\n")) as Record<string, unknown>;
    expect(answer).toEqual({
      status: "queued",
      task: "cli-hold",
      requestedAt: expect.stringMatching(/Z$/),
      requestedBy: "admin",
      withDownstream: false,
    });
    // a refusal is the same error (exit 1) with or without --json
    const refused = await cli(["run", "nope", "--json"]);
    expect(refused).toMatchObject({ code: 1, out: [] });
    expect((await cli(["resume", "cli-ok", "--json"])).code).toBe(1);
    // the queued run holds until released: let it end here, not in the drain at the end
    await pollUntil("the manual run", () =>
      started.slice(before).some((event) => event.taskName === "cli-hold" && event.trigger === "manual"),
    );
    releaseHold();
  });
});

import { readFileSync } from "node:fs";
import { register as promRegister } from "prom-client";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type AdminServer, createAdminServer } from "../../src/admin/index.js";
import { CronwardenError, type RunFinishedEvent, type RunStartedEvent } from "../../src/index.js";
import { createMetrics, type Metrics } from "../../src/metrics/index.js";
import { httpClient, parsePrometheus, sample } from "../helpers/admin.js";
import { createTestDatabase, type TestDatabase } from "../helpers/database.js";
import { pollUntil, SchedulerHarness, yamlOf } from "../helpers/harness.js";
import { LogCapture } from "../helpers/logs.js";

/** The admin HTTP API on a live scheduler and a real PostgreSQL, over real HTTP. */

const TOKEN = "test-admin-token-0123456789abcdef";

let db: TestDatabase;
let harness: SchedulerHarness;
let metrics: Metrics;
let server: AdminServer;
let baseUrl = "";
const adminLogs = new LogCapture();
const transcript: string[] = [];
const call = httpClient(() => baseUrl, transcript);
const started: RunStartedEvent[] = [];
const finished: RunFinishedEvent[] = [];
let releaseLong: () => void = () => {};
const otherServers: AdminServer[] = [];

const config = [
  { name: "api-ok" },
  { name: "api-fail" },
  { name: "api-long", cron: "0 0 0 1 1 *" }, // yearly: runs only when asked
  { name: "api-off", cron: "0 0 0 1 1 *", enabled: false },
];

beforeAll(async () => {
  db = await createTestDatabase();
  harness = SchedulerHarness.create(db.pool, [
    { name: "api-ok", description: "succeeds", handler: async () => {} },
    {
      name: "api-fail",
      handler: async () => {
        // an error message carrying a connection string: the API must not pass its password on
        throw new Error(`cannot reach ${db.url}`);
      },
    },
    {
      name: "api-long",
      handler: () =>
        new Promise<void>((resolve) => {
          releaseLong = resolve;
        }),
    },
    { name: "api-off", handler: async () => {} },
    // registered and not configured: no job, no runs; its history is written by the test
    { name: "api-history", handler: async () => {} },
  ]);
  harness.scheduler.on("run:started", (event) => started.push(event));
  harness.scheduler.on("run:finished", (event) => finished.push(event));
  metrics = createMetrics(harness.scheduler, { logger: adminLogs.logger });
  server = createAdminServer({
    scheduler: harness.scheduler,
    metrics,
    port: 0,
    token: TOKEN,
    logger: adminLogs.logger,
  });
  baseUrl = (await server.listen()).url;
  await harness.writeRaw(yamlOf(config));
  await harness.scheduler.start();
});

afterAll(async () => {
  releaseLong();
  for (const other of otherServers) await other.close();
  await server?.close();
  metrics?.stop();
  await harness?.stop();
  await db?.drop();
});

interface HistoryRunJson {
  id: string;
  scheduledAt: string;
  attempt: number | null;
  outcome: string;
}

/**
 * The ids of `runs` in the history's order, "newest first" (docs/dashboard.md): by slot, newest
 * first; a slot's records by the time each was written, latest first; then by id. The write times
 * are the run log's own (the API does not show them).
 */
async function inHistoryOrder(runs: HistoryRunJson[]): Promise<string[]> {
  const { rows } = await db.pool.query<{ id: string; timestamp: Date }>(
    "SELECT id, timestamp FROM agenda_logs WHERE id = ANY($1::uuid[])",
    [runs.map((run) => run.id)],
  );
  const writtenAt = new Map(rows.map((row) => [row.id, row.timestamp.getTime()]));
  const key = (run: HistoryRunJson) =>
    [Date.parse(run.scheduledAt), writtenAt.get(run.id) ?? Number.NaN] as const;
  return [...runs]
    .sort((a, b) => {
      const [slotA, writtenA] = key(a);
      const [slotB, writtenB] = key(b);
      return slotB - slotA || writtenB - writtenA || (a.id < b.id ? 1 : a.id > b.id ? -1 : 0);
    })
    .map((run) => run.id);
}

/** A run record as the engine writes it (a `success` row, or `retry` for an attempt retried), with its id. */
async function writeRecord(
  task: string,
  record: { slot: number; writtenAt: number; attempt: number; outcome: string },
): Promise<string> {
  const iso = (ms: number) => new Date(ms).toISOString();
  const { rows } = await db.pool.query<{ id: string }>(
    `INSERT INTO agenda_logs (timestamp, level, event, job_name, message, duration, meta)
     VALUES ($1, 'info', $2, $3, 'x', 100, $4) RETURNING id`,
    [
      new Date(record.writtenAt),
      record.outcome === "failed" ? "retry" : "success",
      task,
      {
        scheduledAt: iso(record.slot),
        outcome: record.outcome,
        attempt: record.attempt,
        startedAt: iso(record.writtenAt - 100),
        finishedAt: iso(record.writtenAt),
        instanceId: "test:1",
      },
    ],
  );
  return rows[0]?.id as string;
}

const runsOf = (task: string, outcome?: string) =>
  finished.filter((event) => event.taskName === task && (outcome === undefined || event.outcome === outcome))
    .length;

describe("status and history", () => {
  it("GET /healthz answers while the process is up", async () => {
    const answer = await call("GET", "/healthz");
    expect(answer).toMatchObject({ status: 200, json: { status: "ok" } });
  });

  it("GET /healthz answers 503 after the event loop was blocked past the threshold", async () => {
    const strict = createAdminServer({
      scheduler: harness.scheduler,
      port: 0,
      // well above the stalls of a loaded 2-core machine, so the calm the test waits for comes
      eventLoopStallMs: 1_500,
      logger: adminLogs.logger,
    });
    otherServers.push(strict);
    const { url } = await strict.listen();
    const healthy = await pollUntil("a calm event loop", async () => {
      const response = await fetch(`${url}/healthz`);
      return response.status === 200 ? response : undefined;
    });
    expect(await healthy.json()).toMatchObject({ status: "ok" });
    const blockedUntil = Date.now() + 2_500;
    while (Date.now() < blockedUntil) {
      // synchronous work: the event loop is stuck for 2.5 s
    }
    const stalled = await fetch(`${url}/healthz`);
    expect(stalled.status).toBe(503);
    const body = (await stalled.json()) as { status: string; eventLoopDelayMs: number; error: string };
    expect(body.status).toBe("stalled");
    expect(body.eventLoopDelayMs).toBeGreaterThan(1_500);
    expect(body.error).toMatch(/event loop was blocked for \d+ ms .*limit 1500 ms/);
  });

  it("GET /tasks shows each task's desired and runtime state after real runs, dates as ISO", async () => {
    await pollUntil(
      "2 runs of api-ok and 2 of api-fail",
      () => runsOf("api-ok") >= 2 && runsOf("api-fail") >= 2,
    );
    const tasks = await pollUntil("both outcomes in the status", async () => {
      const answer = await call("GET", "/tasks");
      const list = answer.json as Array<{ name: string; lastOutcome: string | null }>;
      const outcomes = new Map(list.map((task) => [task.name, task.lastOutcome]));
      return outcomes.get("api-ok") === "succeeded" && outcomes.get("api-fail") === "failed"
        ? list
        : undefined;
    });
    const byName = new Map(tasks.map((task) => [task.name, task]));
    expect(byName.get("api-ok")).toMatchObject({
      registered: true,
      description: "succeeds",
      configured: { enabled: true, cron: "* * * * * *", timezone: "UTC" },
      job: {
        enabled: true,
        cron: "* * * * * *",
        timezone: "UTC",
        nextRunAt: expect.stringMatching(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/),
        lastRunAt: expect.stringMatching(/Z$/),
      },
      lastOutcome: "succeeded",
      lastError: null,
      consecutiveFailures: 0,
      consecutiveFailedAttempts: 0,
      missedSlot: null,
    });
    expect(byName.get("api-fail")).toMatchObject({
      lastOutcome: "failed",
      lastError: expect.stringMatching(/^cannot reach postgres/),
      consecutiveFailures: expect.any(Number),
      consecutiveFailedAttempts: expect.any(Number),
    });
    expect(byName.get("api-off")).toMatchObject({ job: { enabled: false }, lastOutcome: null });
  });

  it("GET /tasks/:name adds the next 5 run times; none for a disabled task; 404 unknown, 400 invalid name", async () => {
    const ok = await call("GET", "/tasks/api-ok");
    expect(ok.status).toBe(200);
    const { nextRuns } = ok.json as { nextRuns: string[] };
    expect(nextRuns).toHaveLength(5);
    const times = nextRuns.map((time) => Date.parse(time));
    for (let i = 1; i < times.length; i++) expect((times[i] ?? 0) - (times[i - 1] ?? 0)).toBe(1000);

    const yearly = await call("GET", "/tasks/api-long");
    expect((yearly.json as { nextRuns: string[] }).nextRuns[0]).toMatch(/-01-01T00:00:00\.000Z$/);
    expect(await call("GET", "/tasks/api-off")).toMatchObject({ status: 200, json: { nextRuns: [] } });
    expect(await call("GET", "/tasks/nope")).toMatchObject({
      status: 404,
      json: { error: expect.stringContaining('no task named "nope"') },
    });
    expect(await call("GET", "/tasks/bad%20name")).toMatchObject({
      status: 400,
      json: { error: expect.stringMatching(/^invalid path\.name: task name must be/) },
    });
  });

  it("GET /tasks/:name/runs lists finished runs newest slot first; limit validated 1-500", async () => {
    const answer = await call("GET", "/tasks/api-ok/runs?limit=2");
    expect(answer.status).toBe(200);
    const runs = answer.json as HistoryRunJson[];
    expect(runs).toHaveLength(2);
    expect(runs.map((run) => run.id)).toEqual(await inHistoryOrder(runs));
    // every row of a longer list too, whatever order the records were written in (a slot the event
    // loop's stall above made late can be recorded after newer ones, skipped or run)
    const all = (await call("GET", "/tasks/api-ok/runs?limit=500")).json as HistoryRunJson[];
    expect(all.length).toBeGreaterThanOrEqual(2);
    expect(all.map((run) => run.id)).toEqual(await inHistoryOrder(all));
    expect(all.find((run) => run.outcome === "succeeded")).toMatchObject({
      taskName: "api-ok",
      trigger: "schedule",
      attempt: 1,
      scheduledAt: expect.stringMatching(/Z$/),
      instanceId: harness.scheduler.instanceId,
    });
    const failed = await call("GET", "/tasks/api-fail/runs?limit=1&outcome=failed");
    expect(failed.json).toMatchObject([{ outcome: "failed", error: expect.stringMatching(/^cannot reach/) }]);

    for (const [query, message] of [
      ["limit=0", /^invalid query\.limit: limit must be a whole number from 1 to 500$/],
      ["limit=501", /^invalid query\.limit: limit must be a whole number from 1 to 500$/],
      ["limit=abc", /^invalid query\.limit: limit must be a whole number from 1 to 500$/],
      ["limit=5&order=asc", /^invalid query: unexpected "order"$/],
    ] as const) {
      const bad = await call("GET", `/tasks/api-ok/runs?${query}`);
      expect(bad.status, query).toBe(400);
      expect((bad.json as { error: string }).error, query).toMatch(message);
    }
    expect((await call("GET", "/tasks/nope/runs")).status).toBe(404);
    expect((await call("GET", "/nothing-here")).json).toEqual({
      error: "no such endpoint: GET /nothing-here",
    });
  });
});

describe("the history's order", () => {
  it("a late record of an older slot stays at its slot; a slot's attempts latest written first; then by id; pages keep it", async () => {
    const MIN = 60_000;
    const base = Math.floor(Date.now() / MIN) * MIN - 10 * MIN;
    const write = (slot: number, writtenAt: number, attempt = 1, outcome = "succeeded") =>
      writeRecord("api-history", { slot, writtenAt, attempt, outcome });
    // written in this order: the newest slot's run, then a late run of an older slot, then a
    // slot's two attempts, then two records of one slot written at one instant
    const newest = await write(base + 3 * MIN, base + 3 * MIN + 1_000);
    const late = await write(base + MIN, base + 3 * MIN + 5_000);
    const retried = await write(base + 2 * MIN, base + 2 * MIN + 1_000, 1, "failed");
    const retry = await write(base + 2 * MIN, base + 2 * MIN + 3_000, 2);
    const [tieHigh, tieLow] = [await write(base, base + 500), await write(base, base + 500)].sort().reverse();
    const expected = [newest, retry, retried, late, tieHigh, tieLow];

    const listed = (await call("GET", "/tasks/api-history/runs?limit=500")).json as HistoryRunJson[];
    expect(listed.map((run) => run.id)).toEqual(expected);
    expect(listed.map((run) => [Date.parse(run.scheduledAt) - base, run.attempt])).toEqual([
      [3 * MIN, 1],
      [2 * MIN, 2],
      [2 * MIN, 1],
      [MIN, 1],
      [0, 1],
      [0, 1],
    ]);
    // one run a page: every page boundary, the one between two records written at one instant too
    const paged: string[] = [];
    let cursor: string | null = null;
    do {
      const page = await call("GET", `/tasks/api-history/runs?limit=1${cursor ? `&cursor=${cursor}` : ""}`);
      paged.push(...(page.json as HistoryRunJson[]).map((run) => run.id));
      cursor = page.headers.get("x-next-cursor");
    } while (cursor && paged.length <= expected.length);
    expect(paged).toEqual(expected);
  });
});

describe("run now", () => {
  it("POST /tasks/:name/run: 202 queued and the run appears; 409 while it runs and for a disabled task; 404 unknown", async () => {
    const before = started.length;
    const queued = await call("POST", "/tasks/api-long/run", { token: TOKEN });
    expect(queued).toMatchObject({
      status: 202,
      json: { status: "queued", task: "api-long", requestedAt: expect.stringMatching(/Z$/) },
    });
    await pollUntil("the manual run to start", () =>
      started.slice(before).some((event) => event.taskName === "api-long" && event.trigger === "manual"),
    );
    const running = await call("POST", "/tasks/api-long/run", { token: TOKEN });
    expect(running).toMatchObject({
      status: 409,
      json: { error: expect.stringContaining("is running now"), status: "running" },
    });
    expect((await call("GET", "/tasks/api-long")).json).toMatchObject({ running: true });

    releaseLong();
    const [run] = await pollUntil("the manual run in the history", async () => {
      const answer = await call("GET", "/tasks/api-long/runs?limit=1");
      const runs = answer.json as Array<{ trigger?: string }>;
      return runs[0]?.trigger === "manual" ? runs : undefined;
    });
    expect(run).toMatchObject({ outcome: "succeeded", trigger: "manual" });

    expect(await call("POST", "/tasks/api-off/run", { token: TOKEN })).toMatchObject({
      status: 409,
      json: { error: expect.stringContaining("is disabled"), status: "disabled" },
    });
    expect(await call("POST", "/tasks/nope/run", { token: TOKEN })).toMatchObject({
      status: 404,
      json: { error: expect.stringContaining("nope") },
    });
  });

  it("refuses a body with fields, and a body that is not JSON, with 400", async () => {
    const withField = await call("POST", "/tasks/api-ok/run", {
      token: TOKEN,
      body: '{"force":true}',
      contentType: "application/json",
    });
    expect(withField).toMatchObject({ status: 400, json: { error: 'invalid body: unexpected "force"' } });
    const broken = await call("POST", "/tasks/api-ok/run", {
      token: TOKEN,
      body: "{",
      contentType: "application/json",
    });
    expect(broken.status).toBe(400);
    expect((broken.json as { error: string }).error).toMatch(/JSON/);
  });
});

describe("access", () => {
  it("mutating calls need the bearer token: none or a wrong one is 401; reads on loopback do not", async () => {
    const none = await call("POST", "/tasks/api-ok/run");
    expect(none).toMatchObject({
      status: 401,
      json: { error: expect.stringContaining("missing bearer token") },
    });
    expect(none.headers.get("www-authenticate")).toMatch(/^Bearer/);
    const wrong = await call("POST", "/tasks/api-ok/run", { token: `${TOKEN}x` });
    expect(wrong).toMatchObject({ status: 401, json: { error: "invalid bearer token" } });
    expect((await call("GET", "/tasks")).status).toBe(200);
  });

  it("without a configured token, mutating calls are refused with 403 naming CRONWARDEN_ADMIN_TOKEN", async () => {
    const open = createAdminServer({ scheduler: harness.scheduler, port: 0, logger: adminLogs.logger });
    otherServers.push(open);
    const { url } = await open.listen();
    const refused = await fetch(`${url}/tasks/api-ok/run`, {
      method: "POST",
      headers: { authorization: `Bearer ${TOKEN}` },
    });
    expect(refused.status).toBe(403);
    expect(await refused.json()).toEqual({
      error: expect.stringMatching(/no operator token is configured; set CRONWARDEN_ADMIN_TOKEN/),
    });
    expect((await fetch(`${url}/tasks`)).status).toBe(200);
    expect(await (await fetch(`${url}/metrics`)).json()).toEqual({
      error: "metrics are not enabled on this admin server",
    });
  });

  it("refuses to bind beyond loopback without a token, or with a short one", () => {
    for (const host of ["0.0.0.0", "::", "10.1.2.3"]) {
      expect(() =>
        createAdminServer({ scheduler: harness.scheduler, host, port: 0, logger: adminLogs.logger }),
      ).toThrow(
        expect.objectContaining({ code: "INVALID_SETTINGS", message: expect.stringContaining(host) }),
      );
    }
    expect(() =>
      createAdminServer({ scheduler: harness.scheduler, port: 0, token: "short", logger: adminLogs.logger }),
    ).toThrow(CronwardenError);
  });

  it("beyond loopback every endpoint but the probes needs the token", async () => {
    const exposed = createAdminServer({
      scheduler: harness.scheduler,
      metrics,
      host: "0.0.0.0",
      port: 0,
      token: TOKEN,
      logger: adminLogs.logger,
    });
    otherServers.push(exposed);
    const { url } = await exposed.listen();
    const port = new URL(url).port;
    // kubelet probes carry no credentials: /healthz and /readyz answer without the token
    expect((await fetch(`http://127.0.0.1:${port}/healthz`)).status).toBe(200);
    expect([200, 503]).toContain((await fetch(`http://127.0.0.1:${port}/readyz`)).status);
    for (const path of ["/tasks", "/metrics", "/config"]) {
      const response = await fetch(`http://127.0.0.1:${port}${path}`);
      expect(response.status, path).toBe(401);
      transcript.push(await response.text());
      const allowed = await fetch(`http://127.0.0.1:${port}${path}`, {
        headers: { authorization: `Bearer ${TOKEN}` },
      });
      expect(allowed.status, path).toBe(200);
      transcript.push(await allowed.text());
    }
  });
});

describe("config", () => {
  it("GET /config shows the desired state in force, rejected entries with reasons, and the last reconcile", async () => {
    const initial = await call("GET", "/config");
    expect(initial.json).toMatchObject({
      desired: {
        source: expect.stringContaining(harness.configPath),
        revision: expect.any(String),
        tasks: expect.arrayContaining([
          { name: "api-ok", enabled: true, cron: "* * * * * *", timezone: "UTC" },
        ]),
        rejected: [],
      },
      lastReconcile: { trigger: "config", at: expect.stringMatching(/Z$/) },
    });

    await harness.writeConfig([...config, { name: "api-ghost", cron: "*/61 * * * *" }]);
    const after = await call("GET", "/config");
    expect(after.json).toMatchObject({
      desired: {
        rejected: [
          {
            index: 4,
            name: "api-ghost",
            field: "cron",
            value: "*/61 * * * *",
            reason: expect.stringContaining("step 61 is outside 1-59"),
          },
        ],
      },
      lastReconcile: {
        trigger: "config",
        changes: [],
        reported: [{ kind: "reject", task: "api-ghost", reason: expect.stringContaining("*/61") }],
        unchanged: expect.arrayContaining(["api-ok", "api-fail"]),
      },
    });
  });
});

describe("metrics", () => {
  it("GET /metrics: Prometheus text with run counters, lateness, and per-task gauges", async () => {
    // the runs seen before a scrape are all in it (later ones may be too)
    let succeeded = 0;
    const answer = await pollUntil("a scrape after 3 successes and 2 failures were counted", async () => {
      succeeded = runsOf("api-ok", "succeeded");
      const failed = runsOf("api-fail", "failed");
      const scraped = await call("GET", "/metrics");
      return succeeded >= 3 && failed >= 2 ? scraped : undefined;
    });
    expect(answer.status).toBe(200);
    expect(answer.headers.get("content-type")).toMatch(/^text\/plain; version=0\.0\.4/);
    const samples = parsePrometheus(answer.text);
    expect(
      sample(samples, "cronwarden_runs_total", { task: "api-ok", outcome: "succeeded" }),
    ).toBeGreaterThanOrEqual(succeeded);
    expect(
      sample(samples, "cronwarden_runs_total", { task: "api-fail", outcome: "failed" }),
    ).toBeGreaterThanOrEqual(2);
    expect(
      sample(samples, "cronwarden_run_start_lateness_seconds_count", { task: "api-ok" }),
    ).toBeGreaterThanOrEqual(succeeded);
    expect(
      sample(samples, "cronwarden_run_duration_seconds_count", { task: "api-ok", outcome: "succeeded" }),
    ).toBeGreaterThanOrEqual(succeeded);
    expect(
      sample(samples, "cronwarden_run_start_lateness_seconds_bucket", { task: "api-ok", le: "+Inf" }),
    ).toBe(sample(samples, "cronwarden_run_start_lateness_seconds_count", { task: "api-ok" }));
    const now = Date.now() / 1000;
    expect(sample(samples, "cronwarden_task_next_run_timestamp_seconds", { task: "api-ok" })).toBeGreaterThan(
      now - 5,
    );
    expect(
      sample(samples, "cronwarden_task_next_run_timestamp_seconds", { task: "api-off" }),
    ).toBeUndefined();
    expect(sample(samples, "cronwarden_task_enabled", { task: "api-off" })).toBe(0);
    // the stopped-task gauges: api-ok runs every second, so it is on time
    expect(sample(samples, "cronwarden_task_expected_interval_seconds", { task: "api-ok" })).toBe(1);
    expect(sample(samples, "cronwarden_task_next_run_overdue_seconds", { task: "api-ok" })).toBeLessThan(5);
    expect(sample(samples, "cronwarden_task_next_run_overdue_seconds", { task: "api-off" })).toBeUndefined();
    const { version } = JSON.parse(readFileSync("package.json", "utf8")) as { version: string };
    expect(sample(samples, "cronwarden_build_info", { version, node_version: process.version })).toBe(1);
    expect(sample(samples, "cronwarden_config_source_up", {})).toBe(1);
    // prom-client's default process and Node.js metrics
    expect(sample(samples, "process_cpu_user_seconds_total", {})).toBeGreaterThan(0);
    expect(sample(samples, "nodejs_eventloop_lag_p99_seconds", {})).toBeGreaterThanOrEqual(0);
    expect(sample(samples, "cronwarden_task_enabled", { task: "api-ok" })).toBe(1);
    expect(
      sample(samples, "cronwarden_task_last_success_timestamp_seconds", { task: "api-ok" }),
    ).toBeGreaterThan(now - 30);
    expect(
      sample(samples, "cronwarden_task_consecutive_failures", { task: "api-fail" }),
    ).toBeGreaterThanOrEqual(1);
    expect(
      sample(samples, "cronwarden_reconciles_total", { trigger: "config", result: "changed" }),
    ).toBeGreaterThanOrEqual(1);
    expect(sample(samples, "cronwarden_config_reloads_total", { result: "loaded" })).toBeGreaterThanOrEqual(
      1,
    );
    expect(sample(samples, "cronwarden_config_rejected_entries_total")).toBeGreaterThanOrEqual(1); // api-ghost
    expect(sample(samples, "cronwarden_runs_in_progress", { task: "api-long" })).toBe(0);
    // cronwarden's own registry carries the process and Node.js defaults; prom-client's global one is untouched
    expect(answer.text).toMatch(/^process_resident_memory_bytes /m);
    expect(await promRegister.metrics()).not.toMatch(/cronwarden_/);
  });
});

describe("readiness and secrets", () => {
  it("GET /readyz is 200 with the readiness body while running", async () => {
    expect(await call("GET", "/readyz")).toMatchObject({
      status: 200,
      json: { ready: true, database: true, desiredStateLoaded: true, workersStarted: true },
    });
  });

  it("no response and no admin log line carries the token or the database password", () => {
    const password = decodeURIComponent(new URL(db.url).password);
    const everything = transcript.join("\n");
    expect(everything).toContain("cannot reach postgres"); // the failing task's error was served...
    expect(everything).not.toContain(TOKEN);
    if (password) expect(everything).not.toContain(password); // ...without its password
    const logText = adminLogs.lines.map((line) => JSON.stringify(line)).join("\n");
    expect(logText).not.toContain(TOKEN);
    if (password) expect(logText).not.toContain(password);
  });

  it("GET /readyz is 503 once the scheduler has stopped", async () => {
    await harness.scheduler.stop();
    expect(await call("GET", "/readyz")).toMatchObject({ status: 503, json: { ready: false } });
    expect((await call("GET", "/healthz")).status).toBe(200);
  });
});

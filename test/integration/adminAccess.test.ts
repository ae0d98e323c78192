import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type AdminServer, createAdminServer } from "../../src/admin/index.js";
import {
  createMetrics,
  createMetricsServer,
  type Metrics,
  type MetricsServer,
} from "../../src/metrics/index.js";
import { httpClient } from "../helpers/admin.js";
import { createTestDatabase, type TestDatabase } from "../helpers/database.js";
import { pollUntil, SchedulerHarness, yamlOf } from "../helpers/harness.js";
import { LogCapture } from "../helpers/logs.js";

/**
 * Who may call what: every admin endpoint with no token, a viewer token, an operator token and a
 * wrong one, on a server bound to loopback and on one bound beyond it (0.0.0.0, called here over
 * 127.0.0.1), over real HTTP on a live scheduler and PostgreSQL. Then a run-now by a named
 * operator token: its name in the run record and the audit trail, its secret nowhere. And the
 * read-only metrics listener (CRONWARDEN_METRICS_PORT), bound beyond loopback beside them: /metrics
 * for anyone, nothing else for anybody.
 */

const VIEWER = { name: "dash-viewer", role: "viewer" as const, secret: "viewer-secret-0123456789abcdef" };
const OPERATOR = { name: "ops-alice", role: "operator" as const, secret: "operator-secret-0123456789abcd" };
const LEGACY = "legacy-admin-token-0123456789ab";
const SECRETS = [VIEWER.secret, OPERATOR.secret, LEGACY];

let db: TestDatabase;
let harness: SchedulerHarness;
let metrics: Metrics;
const logs = new LogCapture();
const servers: AdminServer[] = [];
const urls: Record<"loopback" | "beyond" | "metricsListener", string> = {
  loopback: "",
  beyond: "",
  metricsListener: "",
};
let metricsListener: MetricsServer;
const transcript: string[] = [];

beforeAll(async () => {
  db = await createTestDatabase();
  harness = SchedulerHarness.create(db.pool, [
    { name: "acc-off", handler: async () => {} },
    { name: "acc-manual", handler: async () => {} },
  ]);
  metrics = createMetrics(harness.scheduler, { logger: logs.logger });
  for (const [where, host] of [
    ["loopback", "127.0.0.1"],
    ["beyond", "0.0.0.0"],
  ] as const) {
    const server = createAdminServer({
      scheduler: harness.scheduler,
      metrics,
      host,
      port: 0,
      token: LEGACY,
      tokens: [VIEWER, OPERATOR],
      logger: logs.logger,
    });
    servers.push(server);
    urls[where] = `http://127.0.0.1:${new URL((await server.listen()).url).port}`;
  }
  metricsListener = createMetricsServer({ metrics, host: "0.0.0.0", port: 0, logger: logs.logger });
  urls.metricsListener = `http://127.0.0.1:${new URL((await metricsListener.listen()).url).port}`;
  await harness.writeRaw(
    yamlOf([
      { name: "acc-off", cron: "0 0 0 1 1 *", enabled: false },
      { name: "acc-manual", cron: "0 0 0 1 1 *" }, // yearly: runs only when asked
    ]),
  );
  await harness.scheduler.start();
});

afterAll(async () => {
  await metricsListener?.close();
  for (const server of servers) await server.close();
  metrics?.stop();
  await harness?.stop();
  await db?.drop();
});

type Who = "none" | "viewer" | "operator" | "legacy" | "wrong";
const secretOf: Record<Who, string | undefined> = {
  none: undefined,
  viewer: VIEWER.secret,
  operator: OPERATOR.secret,
  legacy: LEGACY,
  wrong: `${OPERATOR.secret}x`,
};

/** [method, path, expected status on loopback by caller, beyond loopback by caller]. */
type Row = [string, string, Record<Who, number>, Record<Who, number>];
const READ = { none: 200, viewer: 200, operator: 200, legacy: 200, wrong: 401 };
const PROTECTED_READ = { none: 401, viewer: 200, operator: 200, legacy: 200, wrong: 401 };
const PUBLIC_FILE = { none: 200, viewer: 200, operator: 200, legacy: 200, wrong: 200 };
// probes (a kubelet sends no credentials) answer anyone: they reveal only up/ready booleans
const PROBE = PUBLIC_FILE;
// acc-off is disabled: an allowed run-now is refused by the scheduler (409), not by the access rule
const ACT = { none: 401, viewer: 403, operator: 409, legacy: 409, wrong: 401 };

const TABLE: Row[] = [
  ["GET", "/healthz", PROBE, PROBE],
  ["GET", "/readyz", PROBE, PROBE],
  ["GET", "/metrics", READ, PROTECTED_READ],
  ["GET", "/tasks", READ, PROTECTED_READ],
  ["GET", "/tasks/acc-off", READ, PROTECTED_READ],
  ["GET", "/tasks/acc-off/runs?limit=5", READ, PROTECTED_READ],
  ["GET", "/config", READ, PROTECTED_READ],
  ["GET", "/audit?limit=5", READ, PROTECTED_READ],
  ["GET", "/dashboard/", PUBLIC_FILE, PUBLIC_FILE],
  ["GET", "/dashboard/app.js", PUBLIC_FILE, PUBLIC_FILE],
  ["POST", "/tasks/acc-off/run", ACT, ACT],
];

const cases = TABLE.flatMap(([method, path, loopback, beyond]) =>
  (["loopback", "beyond"] as const).flatMap((where) =>
    (Object.keys(secretOf) as Who[]).map((who) => ({
      method,
      path,
      where,
      who,
      status: (where === "loopback" ? loopback : beyond)[who],
    })),
  ),
);

describe("every endpoint, every caller, on loopback and beyond", () => {
  it.each(cases)(
    "$method $path on $where with $who token -> $status",
    async ({ method, path, where, who, status }) => {
      const call = httpClient(() => urls[where], transcript);
      const secret = secretOf[who];
      const answer = await call(method, path, secret === undefined ? {} : { token: secret });
      expect(answer.status).toBe(status);
      if (status === 401)
        expect(answer.headers.get("www-authenticate")).toMatch(/^Bearer realm="cronwarden"/);
      if (status === 403) {
        expect(answer.json).toEqual({
          error: `token "dash-viewer" is a viewer token; POST /tasks/:name/run needs an operator token`,
        });
      }
      if (status === 409) expect(answer.json).toMatchObject({ status: "disabled" });
    },
  );

  it("a server with only viewer tokens refuses every run-now with 403, naming the settings to set", async () => {
    const readOnly = createAdminServer({
      scheduler: harness.scheduler,
      host: "0.0.0.0",
      port: 0,
      tokens: [VIEWER],
      logger: logs.logger,
    });
    servers.push(readOnly);
    const port = new URL((await readOnly.listen()).url).port;
    const call = httpClient(() => `http://127.0.0.1:${port}`, transcript);
    expect((await call("GET", "/tasks", { token: VIEWER.secret })).status).toBe(200);
    expect((await call("GET", "/tasks", { token: OPERATOR.secret })).status).toBe(401);
    const refused = await call("POST", "/tasks/acc-manual/run", { token: VIEWER.secret });
    expect(refused).toMatchObject({
      status: 403,
      json: {
        error:
          "POST /tasks/:name/run is disabled: no operator token is configured; set CRONWARDEN_ADMIN_TOKEN, or CRONWARDEN_TOKENS=<name>:operator:<secret>, to enable it",
      },
    });
  });

  it("refuses invalid tokens at construction, naming the problem and never the secret", () => {
    const attempts = [
      { tokens: [{ ...OPERATOR, secret: "short" }] },
      { tokens: [VIEWER, { ...OPERATOR, name: VIEWER.name }] },
      { tokens: [VIEWER], token: VIEWER.secret },
      { tokens: [{ ...OPERATOR, role: "root" as "operator" }] },
      { tokens: [], host: "0.0.0.0" },
    ];
    const messages = attempts.map(({ host, ...options }) => {
      try {
        createAdminServer({ scheduler: harness.scheduler, host, port: 0, logger: logs.logger, ...options });
        return "accepted";
      } catch (error) {
        return (error as Error).message;
      }
    });
    expect(messages).toEqual([
      expect.stringMatching(
        /CRONWARDEN_TOKENS: token "ops-alice": the secret must be at least 16 characters/,
      ),
      expect.stringMatching(/token name "dash-viewer" is given twice/),
      expect.stringMatching(/token "admin" has the same secret as another token/),
      expect.stringMatching(/token "ops-alice": role "root" must be one of viewer, operator/),
      expect.stringMatching(
        /refusing to serve the admin API on 0\.0\.0\.0 \(beyond loopback\) without a token/,
      ),
    ]);
    for (const message of messages) for (const secret of SECRETS) expect(message).not.toContain(secret);
  });
});

describe("the read-only metrics listener", () => {
  const call = httpClient(() => urls.metricsListener, transcript);

  it.each(Object.keys(secretOf) as Who[])(
    "GET /metrics beyond loopback with %s token -> 200, the same text the admin API's /metrics serves",
    async (who) => {
      const secret = secretOf[who];
      const answer = await call("GET", "/metrics", secret === undefined ? {} : { token: secret });
      expect(answer.status).toBe(200);
      expect(answer.headers.get("content-type")).toMatch(/^text\/plain; version=0\.0\.4/);
      expect(answer.headers.get("cache-control")).toBe("no-store");
      expect(answer.text).toMatch(/^cronwarden_build_info\{/m);
      expect(answer.text).toMatch(/^cronwarden_task_enabled\{task="acc-off"\} 0$/m);
    },
  );

  it("answers nothing else: every admin path is 404 (even with an operator token), other methods 405", async () => {
    for (const [method, path] of TABLE) {
      if (path === "/metrics") continue;
      for (const token of [undefined, OPERATOR.secret]) {
        const answer = await call(method, path, token === undefined ? {} : { token });
        expect(answer.status, `${method} ${path}`).toBe(404);
        expect(answer.text).toBe("not found: this listener serves /metrics only\n");
      }
    }
    for (const method of ["POST", "PUT", "DELETE"]) {
      const answer = await call(method, "/metrics", { token: OPERATOR.secret, body: "x" });
      expect(answer.status, method).toBe(405);
      expect(answer.headers.get("allow")).toBe("GET, HEAD");
    }
    const head = await call("HEAD", "/metrics?x=1");
    expect(head.status).toBe(200);
    expect(head.text).toBe("");
    // the 404 of POST /tasks/acc-off/run ran nothing and audited nothing
    const audit = await db.pool.query(
      "SELECT count(*)::int AS n FROM cronwarden_audit WHERE kind = 'run-now' AND task = 'acc-off'",
    );
    expect(audit.rows[0].n).toBe(0);
  });

  it("masks a registered secret in the text it serves, as the admin API does", async () => {
    const leaky = createMetricsServer({
      metrics: { contentType: "text/plain", render: async () => `leak{token="${LEGACY}"} 1\n` },
      port: 0,
      logger: logs.logger,
    });
    try {
      const answer = await fetch((await leaky.listen()).url);
      const text = await answer.text();
      expect(text).toBe('leak{token="***"} 1\n');
    } finally {
      await leaky.close();
    }
  });
});

describe("identity in the audit", () => {
  it("a run-now by a named operator token records its name in the run record and the audit trail", async () => {
    const call = httpClient(() => urls.beyond, transcript);
    const queued = await call("POST", "/tasks/acc-manual/run", { token: OPERATOR.secret });
    expect(queued).toMatchObject({
      status: 202,
      json: { status: "queued", task: "acc-manual", requestedBy: "ops-alice" },
    });

    // the run record: GET /tasks/:name/runs and the agenda_logs row
    const runs = await pollUntil("the manual run in the history", async () => {
      const answer = await call("GET", "/tasks/acc-manual/runs?limit=5", { token: VIEWER.secret });
      const list = answer.json as Array<{ trigger: string; requestedBy: string | null; outcome: string }>;
      return list.length > 0 ? list : undefined;
    });
    expect(runs).toEqual([
      expect.objectContaining({ trigger: "manual", requestedBy: "ops-alice", outcome: "succeeded" }),
    ]);
    const logged = await db.pool.query(
      "SELECT event, meta->>'requestedBy' AS by FROM agenda_logs WHERE job_name = 'acc-manual' AND event IN ('success', 'fail')",
    );
    expect(logged.rows).toEqual([{ event: "success", by: "ops-alice" }]);

    // the audit trail: GET /audit and the row
    const audit = (await call("GET", "/audit?task=acc-manual", { token: VIEWER.secret })).json as Array<{
      kind: string;
    }>;
    expect(audit.filter((entry) => entry.kind === "run-now")).toEqual([
      expect.objectContaining({
        task: "acc-manual",
        kind: "run-now",
        field: "run",
        actor: "ops-alice",
        source: "admin API",
        instance: harness.scheduler.instanceId,
      }),
    ]);

    // the legacy token is the operator named "admin"; a scheduler.runNow() in code is "in-process".
    // Each is asked until accepted: a request while the previous run still holds its lock is refused (409)
    const legacy = await pollUntil("a run-now with the legacy token accepted", async () => {
      const answer = await call("POST", "/tasks/acc-manual/run", { token: LEGACY });
      return answer.status === 202 ? answer : undefined;
    });
    expect(legacy.json).toMatchObject({ requestedBy: "admin" });
    // (a request made before the previous one has started is merged with it: one run)
    await pollUntil("the run asked for with the legacy token", async () => {
      const [latest] = await harness.scheduler.runs("acc-manual", 5);
      return latest?.requestedBy === "admin";
    });
    const inProcess = await pollUntil("a runNow() in code accepted", async () => {
      const result = await harness.scheduler.runNow("acc-manual");
      return result.status === "queued" ? result : undefined;
    });
    expect(inProcess).toMatchObject({ requestedBy: "in-process" });
    const actors = await pollUntil("three run-now rows", async () => {
      const { rows } = await db.pool.query<{ actor: string; source: string }>(
        "SELECT actor, source FROM cronwarden_audit WHERE kind = 'run-now' ORDER BY id",
      );
      return rows.length === 3 ? rows : undefined;
    });
    expect(actors).toEqual([
      { actor: "ops-alice", source: "admin API" },
      { actor: "admin", source: "admin API" },
      { actor: "in-process", source: "scheduler.runNow()" },
    ]);
    const recorded = await pollUntil("the run asked for in code", async () => {
      const list = await harness.scheduler.runs("acc-manual", 5);
      return list[0]?.requestedBy === "in-process" ? list : undefined;
    });
    expect(recorded.map((run) => [run.trigger, run.requestedBy])).toEqual([
      ["manual", "in-process"],
      ["manual", "admin"],
      ["manual", "ops-alice"],
    ]);
  });

  it("a refused run-now writes no audit row", async () => {
    const before = await db.pool.query(
      "SELECT count(*)::int AS n FROM cronwarden_audit WHERE task = 'acc-off'",
    );
    const call = httpClient(() => urls.loopback, transcript);
    expect((await call("POST", "/tasks/acc-off/run", { token: OPERATOR.secret })).status).toBe(409);
    const after = await db.pool.query(
      "SELECT count(*)::int AS n FROM cronwarden_audit WHERE task = 'acc-off'",
    );
    expect(after.rows[0].n).toBe(before.rows[0].n);
  });

  it("no secret is in any response, log line, run record, job row or audit row", async () => {
    const rows = await db.pool.query<{ text: string }>(
      `SELECT row_to_json(l)::text AS text FROM agenda_logs l
       UNION ALL SELECT row_to_json(j)::text FROM agenda_jobs j
       UNION ALL SELECT row_to_json(a)::text FROM cronwarden_audit a
       UNION ALL SELECT row_to_json(d)::text FROM cronwarden_desired_state d`,
    );
    const everything = [
      transcript.join("\n"),
      logs.lines.map((line) => JSON.stringify(line)).join("\n"),
      harness.logs.lines.map((line) => JSON.stringify(line)).join("\n"),
      rows.rows.map((row) => row.text).join("\n"),
    ].join("\n");
    expect(everything).toContain("ops-alice"); // the names are there...
    for (const secret of SECRETS) expect(everything).not.toContain(secret); // ...the secrets are not
    expect(transcript.length).toBeGreaterThan(cases.length);
    const listening = logs.lines.find((line) => /^admin API listening on/.test(String(line.msg)));
    expect(listening?.tokens).toEqual([
      { name: "dash-viewer", role: "viewer" },
      { name: "ops-alice", role: "operator" },
      { name: "admin", role: "operator" },
    ]);
  });
});

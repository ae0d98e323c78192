import { afterAll, beforeAll, expect, it } from "vitest";
import { type AdminServer, createAdminServer } from "../../src/admin/index.js";
import { type Alert, Alerter } from "../../src/alerts/index.js";
import { runCli } from "../../src/cli/main.js";
import { createMetrics, type Metrics } from "../../src/metrics/index.js";
import type { ReconcileResult } from "../../src/reconcile/configReconciler.js";
import { httpClient, parsePrometheus, sample } from "../helpers/admin.js";
import { harnessSuite, pollUntil, type SchedulerHarness, yamlOf } from "../helpers/harness.js";

/**
 * Pause on failure against a real PostgreSQL (docs/behaviour.md, "Pause on failure"): a task
 * failing on a 1 s cron pauses after N failed slots, stays paused through anti-entropy, alerts
 * once per pause, resumes by the API (token, audited) and by a change of its config entry.
 */

const suite = harnessSuite();
const TOKEN = "pause-test-token-0123456789abcdef";
const SECRET = "s3cr3t-partner-pass";
const NAME = "pf-fail";

let harness: SchedulerHarness;
let server: AdminServer;
let metrics: Metrics;
let alerter: Alerter;
const alerts: Alert[] = [];
const reconciles: ReconcileResult[] = [];
const transcript: string[] = [];
const call = httpClient(() => baseUrl, transcript);
let baseUrl = "";
let failing = true;

beforeAll(async () => {
  harness = await suite.start(
    [
      {
        name: NAME,
        // each slot: a first attempt and one retry, both failing; the slot fails once its retry did
        retry: { maxRetries: 1, delayMs: 20, maxDelayMs: 20 },
        handler: async () => {
          if (failing) throw new Error(`partner refused us (password=${SECRET})\nstack line`);
        },
      },
    ],
    [{ name: NAME, cron: "* * * * * *", pauseOnFailure: 3 }],
    { antiEntropyMs: 500 },
  );
  harness.scheduler.on("reconciled", (result) => reconciles.push(result));
  alerter = new Alerter({
    scheduler: harness.scheduler,
    channels: [{ name: "memory", send: async (alert) => void alerts.push(alert) }],
    logger: harness.logs.logger,
  });
  metrics = createMetrics(harness.scheduler, { logger: harness.logs.logger });
  server = createAdminServer({
    scheduler: harness.scheduler,
    metrics,
    port: 0,
    token: TOKEN,
    logger: harness.logs.logger,
  });
  baseUrl = (await server.listen()).url;
});

afterAll(async () => {
  alerter?.stop();
  await server?.close();
  metrics?.stop();
});

interface Row {
  disabled: boolean;
  paused: { at: string; failures: number; slot: string; lastError: string } | null;
  streak: number | null;
}

async function row(): Promise<Row> {
  const result = await suite.db().pool.query<Row>(
    `SELECT disabled, data->'pausedByFailure' AS paused, (data->>'failureStreak')::int AS streak
         FROM agenda_jobs WHERE name = $1`,
    [NAME],
  );
  return result.rows[0] as Row;
}

const waitForPause = (what: string, timeoutMs = 30_000) =>
  pollUntil(
    what,
    async () => {
      const current = await row();
      return current.paused !== null && current;
    },
    { timeoutMs },
  );

/** The distinct slots recorded failed (each slot has two failed attempts: the first and its retry). */
async function failedSlots(): Promise<number[]> {
  const runs = await harness.scheduler.runs(NAME, 500);
  return [
    ...new Set(runs.filter((run) => run.outcome === "failed").map((run) => run.scheduledAt.getTime())),
  ].sort();
}

async function pauseAlerts(count: number): Promise<Alert[]> {
  return pollUntil(`${count} task:paused alert(s)`, async () => {
    await alerter.flush();
    const paused = alerts.filter((alert) => alert.event === "task:paused");
    return paused.length >= count && paused;
  });
}

async function cli(argv: string[]) {
  const out: string[] = [];
  const err: string[] = [];
  const code = await runCli(argv, {
    out: (line) => out.push(line),
    err: (line) => err.push(line),
    env: { CRONWARDEN_ADMIN_URL: baseUrl, CRONWARDEN_ADMIN_TOKEN: TOKEN },
    cwd: process.cwd(),
  });
  return { code, out: out.join("\n"), err: err.join("\n") };
}

async function pausesMetric(): Promise<number | undefined> {
  const answer = await call("GET", "/metrics");
  return sample(parsePrometheus(answer.text), "cronwarden_task_pauses_total", { task: NAME });
}

it("pauses after 3 failed slots (each after its retry); stays disabled through anti-entropy; one alert; status shows it", async () => {
  const paused = await waitForPause("the pause mark");
  expect(paused.disabled).toBe(true);
  expect(paused.paused).toMatchObject({ failures: 3 });
  expect(paused.streak).toBe(3);
  // the secret in the error is redacted, only the first line is kept
  expect(paused.paused?.lastError).toMatch(/^partner refused us \(password=\*\*\*/);
  expect(paused.paused?.lastError).not.toContain(SECRET);
  expect(paused.paused?.lastError).not.toContain("stack line");

  // exactly three slots failed, the pausing one last; each of them after its retry
  const slots = await pollUntil("three failed slots recorded", async () => {
    const found = await failedSlots();
    return found.length === 3 && found;
  });
  expect(new Date(paused.paused?.slot as string).getTime()).toBe(slots[2]);
  await pollUntil("six failed attempts recorded", async () => {
    const all = (await harness.scheduler.runs(NAME, 500)).filter((run) => run.outcome === "failed");
    return all.length === 6;
  });

  // two anti-entropy passes after the pause: no enable, the row stays disabled and paused
  const before = reconciles.length;
  await pollUntil(
    "two anti-entropy passes",
    () => reconciles.slice(before).filter((result) => result.trigger === "anti-entropy").length >= 2,
  );
  for (const result of reconciles.slice(before)) {
    expect(result.applied).toEqual([]);
    expect(result.plan.unchanged).toContain(NAME);
  }
  const after = await row();
  expect(after.disabled).toBe(true);
  expect(after.paused).toEqual(paused.paused);
  // nothing ran since: still exactly three failed slots
  expect(await failedSlots()).toEqual(slots);

  const [alert] = await pauseAlerts(1);
  expect(alert).toMatchObject({ event: "task:paused", task: NAME, severity: "error" });
  expect(alert?.summary).toContain("paused after 3 failed slot(s) in a row");
  expect(JSON.stringify(alert)).not.toContain(SECRET);
  expect(await pausesMetric()).toBe(1);

  const status = await call("GET", `/tasks/${NAME}`);
  expect(status.status).toBe(200);
  expect(status.json).toMatchObject({
    state: "paused",
    job: { enabled: false, pauseOnFailure: 3, pausedByFailure: { failures: 3 } },
    nextRuns: [],
  });
  expect(status.text).not.toContain(SECRET);
  // run-now is refused while paused, saying why
  expect(await harness.scheduler.runNow(NAME)).toMatchObject({
    status: "disabled",
    reason: expect.stringContaining("is paused by failure (after 3 failed slot(s)); resume it first"),
  });
  // the CLI's status: ENABLED "paused", a note, exit 3 (needs attention)
  const listed = await cli(["status"]);
  expect(listed.code).toBe(3);
  expect(listed.out).toMatch(new RegExp(`${NAME}\\s+paused`));
  expect(listed.out).toContain(`${NAME} (paused after 3 failed slot(s))`);
  expect(listed.out).toContain(`resume: cronwarden resume ${NAME}`);
  expect(listed.out).not.toContain(SECRET);
  expect(harness.logs.messages().some((msg) => msg.includes(`task "${NAME}" paused after 3`))).toBe(true);
});

it("POST /tasks/:name/resume needs the token, re-enables the task and is audited; unknown 404, not paused 409", async () => {
  const refused = await call("POST", `/tasks/${NAME}/resume`);
  expect(refused.status).toBe(401);
  expect((await row()).paused).not.toBeNull();

  const resumed = await call("POST", `/tasks/${NAME}/resume`, { token: TOKEN });
  expect(resumed.status).toBe(200);
  expect(resumed.json).toMatchObject({
    status: "resumed",
    task: NAME,
    resumedBy: "admin",
    pausedByFailure: { failures: 3 },
  });
  const audit = await harness.scheduler.auditTrail({ task: NAME });
  expect(audit[0]).toMatchObject({
    kind: "resume",
    field: "pausedByFailure",
    actor: "admin",
    source: "admin API",
    newValue: "resumed",
  });
  expect(audit[0]?.oldValue).toContain("after 3 failed slot(s)");

  expect((await call("POST", "/tasks/nope/resume", { token: TOKEN })).status).toBe(404);

  // enabled again, its streak starts over: it runs, fails three more slots and pauses once more
  const second = await waitForPause("the second pause");
  expect(second.paused?.failures).toBe(3);
  await pollUntil("six failed slots recorded", async () => (await failedSlots()).length === 6);
  expect(await pauseAlerts(2)).toHaveLength(2);
  await pollUntil("the pauses counter at 2", async () => (await pausesMetric()) === 2);

  // a task that is not paused: 409 (here: resumed, then asked again before it failed anew)
  failing = false;
  const byCli = await cli(["resume", NAME]);
  expect(byCli).toMatchObject({ code: 0 });
  expect(byCli.out).toMatch(
    new RegExp(`^resumed ${NAME} \\(paused .* after 3 failed slot\\(s\\)\\) by admin`),
  );
  const notPaused = await call("POST", `/tasks/${NAME}/resume`, { token: TOKEN });
  expect(notPaused.status).toBe(409);
  expect(notPaused.json).toMatchObject({ status: "not-paused" });
  const refusedByCli = await cli(["resume", NAME]);
  expect(refusedByCli.code).toBe(1);
  expect(refusedByCli.err).toContain("is not paused by failure");
  await pollUntil("a succeeded run after the resume", async () =>
    (await harness.scheduler.runs(NAME, 5)).some((run) => run.outcome === "succeeded"),
  );
  // the resume cleared the streak, and a succeeded slot leaves it cleared
  expect((await row()).streak).toBeNull();
  expect(transcript.join("\n")).not.toContain(SECRET);
});

it("a change of its config entry resumes a paused task", async () => {
  failing = true;
  const paused = await waitForPause("the third pause");
  expect(paused.disabled).toBe(true);
  // applied by the reconcile of the new version, or by an anti-entropy pass that saw it first
  // (both read the watcher's snapshot): wait on the row and the audit trail
  await harness.writeRaw(yamlOf([{ name: NAME, cron: "* * * * * *", pauseOnFailure: 4 }]));
  await pollUntil("the resume by the config change", async () => {
    const current = await row();
    return !current.disabled && current.paused === null;
  });
  // the audit rows are written once every action of the reconcile is applied: wait on them
  const audit = await pollUntil("the audit rows of the change", async () => {
    const entries = await harness.scheduler.auditTrail({ task: NAME, limit: 5 });
    const resumed = entries.find((entry) => entry.newValue === "resumed (config entry changed)");
    const changed = entries.find((entry) => entry.field === "pauseOnFailure" && entry.newValue === "4");
    return resumed && changed && { resumed, changed };
  });
  expect(audit.resumed).toMatchObject({
    field: "pausedByFailure",
    oldValue: expect.stringContaining("after 3 failed slot(s)"),
  });
  expect(["change", "drift"]).toContain(audit.resumed.kind);
  expect(audit.changed).toMatchObject({ oldValue: "3", kind: audit.resumed.kind });
  // and it pauses again after the new threshold
  const again = await waitForPause("the fourth pause");
  expect(again.paused?.failures).toBe(4);
  // enabled toggled off clears the pause and leaves it disabled
  await harness.writeRaw(yamlOf([{ name: NAME, cron: "* * * * * *", pauseOnFailure: 4, enabled: false }]));
  await pollUntil("the pause cleared by enabled: false", async () => (await row()).paused === null);
  expect(await row()).toMatchObject({ disabled: true, paused: null });
  await pollUntil("the audit row of the clear", async () =>
    (await harness.scheduler.auditTrail({ task: NAME, limit: 1 })).some(
      (entry) => entry.field === "pausedByFailure" && entry.newValue === "cleared (disabled in the config)",
    ),
  );
});

it("two instances running the same failing task: one pause, one event across both", async () => {
  const two = "pf-two";
  const paused: string[] = [];
  const instances: SchedulerHarness[] = [];
  for (let i = 0; i < 2; i++) {
    const instance = await suite.start(
      [
        {
          name: two,
          handler: async () => {
            throw new Error("always fails");
          },
        },
      ],
      [{ name: two, cron: "* * * * * *", pauseOnFailure: 2 }],
      { antiEntropyMs: 500 },
    );
    instance.scheduler.on("task:paused", (event) => paused.push(`${i}:${event.taskName}:${event.failures}`));
    instances.push(instance);
  }
  const pauseOf = async () => {
    const result = await suite
      .db()
      .pool.query<{ disabled: boolean; paused: { failures: number } | null }>(
        `SELECT disabled, data->'pausedByFailure' AS paused FROM agenda_jobs WHERE name = $1`,
        [two],
      );
    return result.rows[0];
  };
  const row2 = await pollUntil("the pause of pf-two", async () => {
    const current = await pauseOf();
    return current?.paused ? current : undefined;
  });
  expect(row2).toMatchObject({ disabled: true, paused: { failures: 2 } });
  // both instances pass anti-entropy after the pause; still paused, and one event in all
  const seen = instances.map(() => 0);
  for (const [index, instance] of instances.entries()) {
    instance.scheduler.on("reconciled", (result) => {
      if (result.trigger === "anti-entropy") seen[index] = (seen[index] ?? 0) + 1;
    });
  }
  await pollUntil("two anti-entropy passes on each instance", () => seen.every((count) => count >= 2));
  expect(await pauseOf()).toMatchObject({ disabled: true, paused: { failures: 2 } });
  expect(paused).toHaveLength(1);
  expect(paused[0]).toMatch(/^[01]:pf-two:2$/);
});

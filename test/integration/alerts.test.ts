import { createServer, type IncomingHttpHeaders, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { setTimeout as sleep } from "node:timers/promises";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type AlertChannel, Alerter, WebhookAlertChannel } from "../../src/alerts/index.js";
import type { RunFinishedEvent, RunStartedEvent } from "../../src/index.js";
import { createMetrics } from "../../src/metrics/index.js";
import { parsePrometheus, sample } from "../helpers/admin.js";
import { createTestDatabase, type TestDatabase } from "../helpers/database.js";
import { pollUntil, SchedulerHarness, yamlOf } from "../helpers/harness.js";
import { LogCapture } from "../helpers/logs.js";

/** Alerts from a live scheduler to a local webhook receiver over real HTTP. */

interface Received {
  path: string;
  headers: IncomingHttpHeaders;
  body: unknown;
  at: number;
}

let db: TestDatabase;
let receiver: Server;
let receiverUrl = "";
const received: Received[] = [];
const harnesses: SchedulerHarness[] = [];
const hanging: Array<() => void> = [];

beforeAll(async () => {
  db = await createTestDatabase();
  receiver = createServer((request, response) => {
    let text = "";
    request.on("data", (chunk: Buffer) => {
      text += chunk.toString("utf8");
    });
    request.on("end", () => {
      if (request.url === "/never-answers") {
        hanging.push(() => response.end());
        return;
      }
      received.push({
        path: request.url ?? "",
        headers: request.headers,
        body: JSON.parse(text),
        at: Date.now(),
      });
      response.writeHead(request.url === "/broken" ? 500 : 200).end("ok");
    });
  });
  await new Promise<void>((resolve) => receiver.listen(0, "127.0.0.1", resolve));
  receiverUrl = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}`;
});

afterAll(async () => {
  for (const harness of harnesses) await harness.stop();
  for (const finish of hanging) finish();
  receiver?.closeAllConnections();
  await new Promise((resolve) => receiver?.close(resolve));
  await db?.drop();
});

/** A port nothing listens on. */
async function freePort(): Promise<number> {
  const probe = createServer();
  await new Promise<void>((resolve) => probe.listen(0, "127.0.0.1", resolve));
  const { port } = probe.address() as AddressInfo;
  await new Promise((resolve) => probe.close(resolve));
  return port;
}

const at = (path: string) => received.filter((entry) => entry.path === path);

describe("webhook alerts from a live scheduler", () => {
  it("a failing task alerts once per silence window, in JSON and Slack formats; retried attempts do not alert", async () => {
    const silenceMs = 3000;
    const logs = new LogCapture();
    const finished: RunFinishedEvent[] = [];
    const harness = SchedulerHarness.create(db.pool, [
      {
        name: "alert-fail",
        handler: async () => {
          throw new Error("report upstream answered 503");
        },
      },
      {
        name: "alert-retry",
        retry: { maxRetries: 1, delayMs: 50 },
        handler: async () => {
          throw new Error("still failing");
        },
      },
    ]);
    harnesses.push(harness);
    harness.scheduler.on("run:finished", (event) => finished.push(event));
    const alerter = new Alerter({
      scheduler: harness.scheduler,
      channels: [
        new WebhookAlertChannel({
          url: `${receiverUrl}/json`,
          format: "json",
          timeoutMs: 2000,
          name: "json-hook",
          headers: { "x-receiver-key": "k1" },
        }),
        new WebhookAlertChannel({
          url: `${receiverUrl}/slack`,
          format: "slack",
          timeoutMs: 2000,
          name: "slack-hook",
        }),
      ],
      silenceMs,
      logger: logs.logger,
    });
    await harness.writeRaw(yamlOf([{ name: "alert-fail" }, { name: "alert-retry", cron: "0 0 0 1 1 *" }]));
    await harness.scheduler.start();

    const first = await pollUntil("the first JSON alert", () => at("/json")[0]);
    expect(first.headers["content-type"]).toBe("application/json");
    expect(first.headers["x-receiver-key"]).toBe("k1");
    expect(first.body).toEqual({
      event: "run:failed",
      task: "alert-fail",
      severity: "error",
      summary: expect.stringMatching(
        /^task "alert-fail" failed \(slot \S+Z, attempt 1\): report upstream answered 503$/,
      ),
      details: {
        scheduledAt: expect.stringMatching(/Z$/),
        startedAt: expect.stringMatching(/Z$/),
        attempt: 1,
        trigger: "schedule",
        rerun: false,
        runInstanceId: harness.scheduler.instanceId,
        durationMs: expect.any(Number),
        error: "report upstream answered 503",
        errorName: "Error",
      },
      at: expect.stringMatching(/^\d{4}-\d\d-\d\dT.*Z$/),
      instanceId: harness.scheduler.instanceId,
    });
    const slack = await pollUntil("the first Slack alert", () => at("/slack")[0]);
    expect(Object.keys(slack.body as object)).toEqual(["text"]);
    expect((slack.body as { text: string }).text).toMatch(
      /^\*\[ERROR\] cronwarden run:failed\* task `alert-fail`\ntask "alert-fail" failed .*: report upstream answered 503\n/,
    );

    // inside the window: more failures, no more alerts
    const failuresAtFirst = finished.filter((event) => event.taskName === "alert-fail").length;
    await sleep(silenceMs - 1000);
    expect(finished.filter((event) => event.taskName === "alert-fail").length).toBeGreaterThanOrEqual(
      failuresAtFirst + 1,
    );
    expect(
      at("/json").filter((entry) => (entry.body as { task: string }).task === "alert-fail"),
    ).toHaveLength(1);

    // after the window: the next failure alerts again and counts the ones held back
    const second = await pollUntil(
      "the second alert for alert-fail",
      () => at("/json").filter((entry) => (entry.body as { task: string }).task === "alert-fail")[1],
      { timeoutMs: 10_000 },
    );
    const firstAt = Date.parse((first.body as { at: string }).at);
    const secondAt = Date.parse((second.body as { at: string }).at);
    expect(secondAt - firstAt).toBeGreaterThanOrEqual(silenceMs);
    expect(secondAt - firstAt).toBeLessThan(silenceMs + 3000);
    expect((second.body as { details: { suppressed: number } }).details.suppressed).toBeGreaterThanOrEqual(1);

    // a task with retries: one alert, for its final attempt only
    await harness.scheduler.runNow("alert-retry");
    const retryAlert = await pollUntil("the alert for alert-retry", () =>
      at("/json").find((entry) => (entry.body as { task: string }).task === "alert-retry"),
    );
    expect(retryAlert.body).toMatchObject({
      details: { attempt: 2, trigger: "manual", error: "still failing" },
    });
    expect(finished.filter((event) => event.taskName === "alert-retry").map((event) => event.final)).toEqual([
      false,
      true,
    ]);
    alerter.stop();
    await harness.stop();
  });

  it("config trouble alerts: an unreadable file at start-up, then a refused entry", async () => {
    const logs = new LogCapture();
    // its own namespace: no last applied config of the other tests to fall back on
    const harness = SchedulerHarness.create(db.pool, [{ name: "cfg-task", handler: async () => {} }], {
      namespace: "alerts-config",
    });
    harnesses.push(harness);
    const alerter = new Alerter({
      scheduler: harness.scheduler,
      channels: [new WebhookAlertChannel({ url: `${receiverUrl}/config`, timeoutMs: 2000 })],
      logger: logs.logger,
    });
    await harness.writeRaw("tasks: [\n");
    await harness.scheduler.start();
    const unreadable = await pollUntil("the config:error alert", () =>
      at("/config").find((entry) => (entry.body as { event: string }).event === "config:error"),
    );
    expect(unreadable.body).toMatchObject({
      task: null,
      severity: "error",
      summary: expect.stringMatching(
        /cannot be read \(the last valid config stays in force\): .*cannot be parsed/,
      ),
      details: { source: expect.stringContaining(harness.configPath) },
    });
    await harness.writeConfig([
      { name: "cfg-task", cron: "0 0 * * * *" },
      { name: "cfg-other", cron: "*/61 * * * *" },
    ]);
    const rejected = await pollUntil("the config:rejected alert", () =>
      at("/config").find((entry) => (entry.body as { event: string; task: string }).task === "cfg-other"),
    );
    expect(rejected.body).toMatchObject({
      task: "cfg-other",
      severity: "warning",
      details: { reason: expect.stringContaining("step 61 is outside 1-59") },
    });
    alerter.stop();
    await harness.stop();
  });

  it("channels that fail, hang or are unreachable never delay runs; failures are logged and counted", async () => {
    const logs = new LogCapture();
    const started: RunStartedEvent[] = [];
    const harness = SchedulerHarness.create(db.pool, [
      {
        name: "alert-busy",
        handler: async () => {
          throw new Error("failing every second");
        },
      },
    ]);
    harnesses.push(harness);
    harness.scheduler.on("run:started", (event) => started.push(event));
    const metrics = createMetrics(harness.scheduler);
    const secretPath = "/services/T000/B000/secret-webhook-path";
    const closedPort = await freePort();
    const channels: AlertChannel[] = [
      { name: "hangs-forever", send: () => new Promise<void>(() => {}) },
      {
        name: "throws",
        send: () => {
          throw new Error("channel bug");
        },
      },
      new WebhookAlertChannel({ url: `${receiverUrl}/never-answers`, timeoutMs: 300, name: "slow-hook" }),
      new WebhookAlertChannel({ url: `${receiverUrl}/broken`, timeoutMs: 2000, name: "broken-hook" }),
      new WebhookAlertChannel({ url: `http://127.0.0.1:${closedPort}${secretPath}`, timeoutMs: 2000 }),
    ];
    const alerter = new Alerter({
      scheduler: harness.scheduler,
      channels,
      silenceMs: 0, // every failure alerts: the worst case for the runs
      sendTimeoutMs: 500,
      logger: logs.logger,
      observer: metrics.alerts,
    });
    await harness.writeRaw(yamlOf([{ name: "alert-busy" }]));
    await harness.scheduler.start();
    await pollUntil("6 runs", () => started.length >= 6, { timeoutMs: 20_000 });

    // every slot ran on time: one per second, each starting within a poll (0.5 s) of its slot
    const firstSix = started.slice(0, 6);
    for (const run of firstSix)
      expect(run.startedAt.getTime() - run.scheduledAt.getTime()).toBeLessThan(1200);
    const slots = firstSix.map((run) => run.scheduledAt.getTime());
    for (let i = 1; i < slots.length; i++) expect((slots[i] ?? 0) - (slots[i - 1] ?? 0)).toBe(1000);

    const samples = await pollUntil("failures counted for every channel", async () => {
      const parsed = parsePrometheus(await metrics.render());
      const counted = [
        "hangs-forever",
        "throws",
        "slow-hook",
        "broken-hook",
        `webhook:127.0.0.1:${closedPort}`,
      ].every(
        (channel) =>
          (sample(parsed, "cronwarden_alerts_failed_total", { channel, event: "run:failed" }) ?? 0) >= 2,
      );
      return counted ? parsed : undefined;
    });
    // created at 0 when the Alerter started (so the first failure is an increase), never counted up
    expect(sample(samples, "cronwarden_alerts_sent_total", { channel: "throws", event: "run:failed" })).toBe(
      0,
    );
    const messages = logs.messages();
    for (const expected of [
      /could not be sent through hangs-forever: no answer within 500 ms$/,
      /could not be sent through throws: channel bug$/,
      /could not be sent through slow-hook: slow-hook did not answer within 300 ms$/,
      /could not be sent through broken-hook: broken-hook answered HTTP 500$/,
      new RegExp(
        `could not be sent through webhook:127\\.0\\.0\\.1:${closedPort}: \\S+ unreachable: ECONNREFUSED$`,
      ),
    ]) {
      expect(
        messages.some((message) => expected.test(message)),
        String(expected),
      ).toBe(true);
    }
    // the webhook URL's path (a secret for Slack-style hooks) is never logged
    expect(JSON.stringify(logs.lines)).not.toContain("secret-webhook-path");
    alerter.stop();
    metrics.stop();
    await harness.stop();
  });
});

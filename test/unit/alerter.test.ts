import { EventEmitter } from "node:events";
import { describe, expect, it } from "vitest";
import { type Alert, type AlertChannel, Alerter, slackText } from "../../src/alerts/index.js";
import type { RunFinishedEvent, SchedulerEvents } from "../../src/index.js";
import { LogCapture } from "../helpers/logs.js";
import { pollUntil } from "../helpers/poll.js";

/** The Alerter's rules on synthetic scheduler events: what is worth an alert, silences, isolation. */

class FakeScheduler extends EventEmitter<SchedulerEvents> {
  readonly instanceId = "test-instance";
}

function recorder(name = "memory"): AlertChannel & { alerts: Alert[] } {
  const alerts: Alert[] = [];
  return { name, alerts, send: async (alert) => void alerts.push(alert) };
}

const slot = new Date("2030-01-01T00:00:00.000Z");

function finished(overrides: Partial<RunFinishedEvent> = {}): RunFinishedEvent {
  return {
    taskName: "report",
    scheduledAt: slot,
    startedAt: new Date(slot.getTime() + 100),
    instanceId: "test-instance",
    attempt: 1,
    trigger: "schedule",
    rerun: false,
    outcome: "failed",
    durationMs: 50,
    error: new Error("boom"),
    final: true,
    ...overrides,
  };
}

function setUp(options: { silenceMs?: number; channels?: AlertChannel[]; now?: () => Date } = {}) {
  const scheduler = new FakeScheduler();
  const channel = recorder();
  const logs = new LogCapture();
  const alerter = new Alerter({
    scheduler,
    channels: options.channels ?? [channel],
    logger: logs.logger,
    silenceMs: options.silenceMs ?? 60_000,
    sendTimeoutMs: 200,
    ...(options.now ? { now: options.now } : {}),
  });
  return { scheduler, channel, logs, alerter };
}

describe("Alerter", () => {
  it("alerts a final failure, not an attempt that will be retried, nor a success", async () => {
    const { scheduler, channel, alerter } = setUp();
    scheduler.emit("run:finished", finished({ final: false }));
    scheduler.emit("run:finished", finished({ outcome: "succeeded", final: true, error: undefined }));
    scheduler.emit("run:finished", finished({ attempt: 2, error: new Error("still broken") }));
    await alerter.flush();
    expect(channel.alerts).toEqual([
      {
        event: "run:failed",
        task: "report",
        severity: "error",
        summary: 'task "report" failed (slot 2030-01-01T00:00:00.000Z, attempt 2): still broken',
        details: expect.objectContaining({
          attempt: 2,
          error: "still broken",
          scheduledAt: slot.toISOString(),
        }),
        at: expect.any(Date),
        instanceId: "test-instance",
      },
    ]);
  });

  it("alerts a timeout even when retried; a lost lock once (as run:lock-lost, not also as run:failed)", async () => {
    const { scheduler, channel, alerter } = setUp();
    const timeout = Object.assign(new Error("timed out after 5 s"), { name: "RunTimeoutError" });
    scheduler.emit("run:finished", finished({ error: timeout, final: false }));
    const lockLost = Object.assign(new Error("lock lost: taken over"), { name: "LockLostError" });
    scheduler.emit("run:lock-lost", { ...finished(), reason: "taken over" });
    scheduler.emit("run:finished", finished({ error: lockLost }));
    await alerter.flush();
    expect(channel.alerts.map((alert) => [alert.event, alert.severity])).toEqual([
      ["run:timed-out", "error"],
      ["run:lock-lost", "error"],
    ]);
  });

  it("alerts abandoned runs, missed slots, refused config entries and an unreadable config source", async () => {
    const { scheduler, channel, alerter } = setUp();
    scheduler.emit("run:abandoned", { ...finished(), reason: "ignored its signal for 30 s" });
    scheduler.emit("missed-slot", {
      taskName: "report",
      scheduledAt: slot,
      detectedAt: new Date(),
      reason: "late",
    });
    scheduler.emit("config:rejected", { taskName: "ghost", reason: "no such task", revision: "r1" });
    scheduler.emit("config:error", {
      source: "file tasks.yaml",
      error: new Error("unexpected end of input"),
    });
    await alerter.flush();
    expect(channel.alerts.map((alert) => [alert.event, alert.task, alert.severity])).toEqual([
      ["run:abandoned", "report", "critical"],
      ["missed-slot", "report", "error"],
      ["config:rejected", "ghost", "warning"],
      ["config:error", null, "error"],
    ]);
    expect(channel.alerts[3]?.summary).toBe(
      "config source file tasks.yaml cannot be read (the last valid config stays in force): unexpected end of input",
    );
  });

  it("sends one alert per (task, event) per silence window, then says how many were held back", async () => {
    let now = Date.parse("2030-01-01T00:00:00Z");
    const { scheduler, channel, alerter } = setUp({ silenceMs: 10_000, now: () => new Date(now) });
    scheduler.emit("run:finished", finished());
    now += 1000;
    scheduler.emit("run:finished", finished()); // silenced
    scheduler.emit("run:finished", finished({ taskName: "other" })); // another task: its own window
    now += 1000;
    scheduler.emit("run:finished", finished()); // silenced
    now += 8000;
    scheduler.emit("run:finished", finished()); // window over
    await alerter.flush();
    expect(channel.alerts.map((alert) => [alert.task, alert.details.suppressed ?? 0])).toEqual([
      ["report", 0],
      ["other", 0],
      ["report", 2],
    ]);
  });

  it("never throws into the scheduler, never waits for a channel, and logs and counts failures", async () => {
    const results: string[] = [];
    const channels: AlertChannel[] = [
      { name: "hangs", send: () => new Promise<void>(() => {}) },
      {
        name: "throws",
        send: () => {
          throw new Error("sync failure");
        },
      },
      { name: "rejects", send: async () => Promise.reject(new Error("async failure")) },
    ];
    const scheduler = new FakeScheduler();
    const logs = new LogCapture();
    const alerter = new Alerter({
      scheduler,
      channels,
      logger: logs.logger,
      sendTimeoutMs: 100,
      observer: {
        delivered: (channel, event) => results.push(`ok ${channel} ${event}`),
        failed: (channel, event, error) => results.push(`failed ${channel} ${event}: ${error.message}`),
      },
    });
    // the emitter (a run's end) returns before any channel has settled: sending is off its path
    expect(scheduler.emit("run:finished", finished())).toBe(true);
    expect(results).toEqual([]);
    await pollUntil("three failures", () => results.length === 3, { timeoutMs: 2000, intervalMs: 10 });
    expect(results.sort()).toEqual([
      "failed hangs run:failed: no answer within 100 ms",
      "failed rejects run:failed: async failure",
      "failed throws run:failed: sync failure",
    ]);
    expect(logs.messages()).toContain(
      'alert run:failed for task "report" could not be sent through hangs: no answer within 100 ms',
    );
    alerter.stop();
  });

  it("redacts passwords in alert text; stop() unsubscribes", async () => {
    const { scheduler, channel, alerter } = setUp();
    scheduler.emit(
      "run:finished",
      finished({ error: new Error("cannot reach postgres://app:hunter2@db/app") }),
    );
    await alerter.flush();
    expect(JSON.stringify(channel.alerts)).not.toContain("hunter2");
    expect(channel.alerts[0]?.details.error).toBe("cannot reach postgres://app:***@db/app");
    alerter.stop();
    scheduler.emit("run:finished", finished({ taskName: "later" }));
    await alerter.flush(); // a send the event had started would be in flight now
    expect(channel.alerts).toHaveLength(1);
    expect(scheduler.listenerCount("run:finished")).toBe(0);
  });

  it("refuses two channels with one name", () => {
    expect(() => setUp({ channels: [recorder("same"), recorder("same")] })).toThrow(
      /two alert channels are named "same"/,
    );
  });

  it("formats Slack text with its control characters escaped", () => {
    const text = slackText({
      event: "run:failed",
      task: "report",
      severity: "error",
      summary: "a <b> & c",
      details: { attempt: 1, error: "x > y", empty: null },
      at: new Date("2030-01-01T00:00:00Z"),
      instanceId: "host:1",
    });
    expect(text).toBe(
      [
        "*[ERROR] cronwarden run:failed* task `report`",
        "a &lt;b&gt; &amp; c",
        "• attempt: 1",
        "• error: x &gt; y",
        "_host:1 at 2030-01-01T00:00:00.000Z_",
      ].join("\n"),
    );
  });
});

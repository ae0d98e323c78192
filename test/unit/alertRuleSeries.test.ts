import { EventEmitter } from "node:events";
import { describe, expect, it } from "vitest";
import { type AlertChannel, Alerter } from "../../src/alerts/index.js";
import type { Readiness, ReconcileResult, SchedulerEvents, TaskStatus } from "../../src/index.js";
import { createMetrics } from "../../src/metrics/index.js";
import { parsePrometheus, sample } from "../helpers/admin.js";
import { LogCapture } from "../helpers/logs.js";

/**
 * The series the alert rules (deploy/prometheus/cronwarden-alerts.yml) depend on, on synthetic
 * scheduler events: the counters behind a rule exist at 0 before their first event (Prometheus's
 * increase() cannot see a series' first sample), and the rejected-entries gauge follows the
 * config in force instead of counting once.
 */

class FakeScheduler extends EventEmitter<SchedulerEvents> {
  readonly instanceId = "test-instance";
  tasks: TaskStatus[] = [];
  async status(): Promise<TaskStatus[]> {
    return this.tasks;
  }
  async readiness(): Promise<Readiness> {
    return { ready: true, database: true, desiredStateLoaded: true, workersStarted: true };
  }
}

function task(name: string): TaskStatus {
  return {
    name,
    registered: true,
    description: null,
    configured: { enabled: true, cron: "* * * * *", timezone: "UTC" },
    job: {
      enabled: true,
      cron: "* * * * *",
      timezone: "UTC",
      nextRunAt: new Date(Date.now() + 30_000),
      lastRunAt: null,
      lastFinishedAt: null,
    },
    state: "enabled",
    running: false,
    runningOn: null,
    lastOutcome: null,
    lastError: null,
    consecutiveFailures: 0,
    consecutiveFailedAttempts: 0,
    recentOutcomes: [],
    dependencies: { upstreams: [], downstreams: [], when: null, waitAtMost: null },
  } as TaskStatus;
}

function reconciled(rejected: number): ReconcileResult {
  const actions = Array.from({ length: rejected }, (_, index) => ({
    kind: "reject" as const,
    task: `ghost-${index}`,
    reason: "no task of that name is registered in code",
  }));
  return {
    revision: "r1",
    trigger: "config",
    at: new Date(),
    plan: { actions, unchanged: [] },
    applied: [],
    enabledTasks: new Set(),
  } as unknown as ReconcileResult;
}

describe("series behind the alert rules", () => {
  it("the missed-slot, lock-loss and abandoned-run counters exist at 0 for every task once scraped, and count from there", async () => {
    const scheduler = new FakeScheduler();
    scheduler.tasks = [task("nightly"), task("hourly")];
    const metrics = createMetrics(scheduler, { defaultMetrics: false });
    // the first scrape reads the status (the counters rendered before the status gauges may
    // show them from the second one on: Prometheus scrapes again long before a first event matters)
    await metrics.render();
    const before = parsePrometheus(await metrics.render());
    for (const name of ["nightly", "hourly"]) {
      for (const counter of [
        "cronwarden_missed_slots_total",
        "cronwarden_lock_losses_total",
        "cronwarden_runs_abandoned_total",
      ])
        expect(sample(before, counter, { task: name }), `${counter}{task="${name}"}`).toBe(0);
    }

    scheduler.emit("missed-slot", {
      taskName: "nightly",
      scheduledAt: new Date(),
    } as unknown as SchedulerEvents["missed-slot"][0]);
    const after = parsePrometheus(await metrics.render());
    expect(sample(after, "cronwarden_missed_slots_total", { task: "nightly" })).toBe(1);
    expect(sample(after, "cronwarden_missed_slots_total", { task: "hourly" })).toBe(0);
    // a second scrape's zero does not undo a count
    expect(
      sample(parsePrometheus(await metrics.render()), "cronwarden_missed_slots_total", { task: "nightly" }),
    ).toBe(1);
    metrics.stop();
  });

  it("alert delivery counters exist at 0 for every channel and event when the Alerter starts", async () => {
    const scheduler = new FakeScheduler();
    const metrics = createMetrics(scheduler, { defaultMetrics: false });
    const failing: AlertChannel = {
      name: "pager",
      send: async () => {
        throw new Error("pager down");
      },
    };
    const alerter = new Alerter({
      scheduler,
      channels: [failing],
      logger: new LogCapture().logger,
      observer: metrics.alerts,
    });
    const before = parsePrometheus(await metrics.render());
    for (const event of ["run:failed", "missed-slot", "config:rejected", "config:error"]) {
      expect(sample(before, "cronwarden_alerts_failed_total", { channel: "pager", event }), event).toBe(0);
      expect(sample(before, "cronwarden_alerts_sent_total", { channel: "pager", event }), event).toBe(0);
    }
    alerter.raise({
      event: "missed-slot",
      task: "nightly",
      severity: "warning",
      summary: "missed",
      details: {},
      at: new Date(),
      instanceId: "test-instance",
    });
    await alerter.flush(5_000);
    const after = parsePrometheus(await metrics.render());
    expect(sample(after, "cronwarden_alerts_failed_total", { channel: "pager", event: "missed-slot" })).toBe(
      1,
    );
    expect(sample(after, "cronwarden_alerts_sent_total", { channel: "pager", event: "missed-slot" })).toBe(0);
    alerter.stop();
    metrics.stop();
  });

  it("the rejected-entries gauge is the count of the last reconcile, held until a reconcile without them", async () => {
    const scheduler = new FakeScheduler();
    const metrics = createMetrics(scheduler, { defaultMetrics: false });
    const gauge = async () =>
      sample(parsePrometheus(await metrics.render()), "cronwarden_config_entries_rejected");
    expect(await gauge()).toBe(0);
    scheduler.emit("reconciled", reconciled(2));
    expect(await gauge()).toBe(2);
    // an anti-entropy pass over the same config plans the same rejections: still 2, while the
    // counter counted them once
    scheduler.emit("reconciled", { ...reconciled(2), trigger: "anti-entropy" });
    expect(await gauge()).toBe(2);
    scheduler.emit("reconciled", reconciled(0));
    expect(await gauge()).toBe(0);
    metrics.stop();
  });
});

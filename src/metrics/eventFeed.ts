import type { Subscriptions } from "../scheduler/eventSubscriptions.js";
import type { MetricSet } from "./definitions.js";

/**
 * What the scheduler's events count. Runs in progress are this instance's (one process, one
 * scrape target); the last success per task is kept here and merged with the database's view.
 */
export class EventFeed {
  readonly #metrics: MetricSet;
  /** Runs in progress by task: keys of started runs not finished yet. */
  readonly #inProgress = new Map<string, Set<string>>();
  /** Last successful finish seen by this instance, by task (ms since epoch). */
  readonly lastSuccessAt = new Map<string, number>();

  constructor(metrics: MetricSet) {
    this.#metrics = metrics;
  }

  attach(events: Subscriptions): void {
    events.on("run:started", (event) => {
      this.#track(event.taskName, attemptKey(event), true);
      // a re-run or a backfill runs a past slot when asked: its distance from the slot is not lateness
      if (event.attempt === 1 && event.trigger !== "rerun" && event.trigger !== "backfill") {
        const lateness = Math.max(0, event.startedAt.getTime() - event.scheduledAt.getTime()) / 1000;
        this.#metrics.startLateness.observe({ task: event.taskName }, lateness);
      }
    });
    events.on("run:finished", (event) => {
      const task = event.taskName;
      this.#track(task, attemptKey(event), false);
      this.#metrics.runs.inc({ task, outcome: event.outcome });
      this.#metrics.runDuration.observe({ task, outcome: event.outcome }, event.durationMs / 1000);
      if (event.outcome === "succeeded") {
        const finishedAt = event.startedAt.getTime() + event.durationMs;
        this.lastSuccessAt.set(task, Math.max(finishedAt, this.lastSuccessAt.get(task) ?? 0));
      }
    });
    events.on("shard:finished", (event) =>
      this.#metrics.shards.inc({ task: event.taskName, outcome: event.outcome }),
    );
    events.on("sharded-slot:finished", (event) => {
      if (event.durationMs === null) return;
      const labels = { task: event.taskName, outcome: event.outcome };
      this.#metrics.shardedSlotDuration.observe(labels, event.durationMs / 1000);
    });
    events.on("run:retry", (event) => this.#metrics.retries.inc({ task: event.taskName }));
    events.on("run:lock-lost", (event) => this.#metrics.lockLosses.inc({ task: event.taskName }));
    events.on("event-loop:stall", (stall) => this.#metrics.eventLoopStalls.observe(stall.durationMs / 1000));
    events.on("run:abandoned", (event) => this.#metrics.abandoned.inc({ task: event.taskName }));
    events.on("lock:renewed", (event) => this.#metrics.lockRenewals.inc({ task: event.taskName }));
    events.on("missed-slot", (event) => this.#metrics.missedSlots.inc({ task: event.taskName }));
    events.on("task:paused", (event) => this.#metrics.pauses.inc({ task: event.taskName }));
    events.on("slots:skipped", (event) =>
      this.#metrics.skippedSlots.inc({ task: event.taskName, policy: event.policy }, event.count),
    );
    events.on("dependency:wait", (event) => this.#metrics.dependencyWaits.inc({ task: event.taskName }));
    events.on("dependency:decided", (event) => {
      if (event.decision === "queued") this.#metrics.dependencyRuns.inc({ task: event.taskName });
      else this.#metrics.dependencySkips.inc({ task: event.taskName, reason: event.skipKind ?? "unknown" });
    });
    events.on("reconciled", (result) => {
      this.#metrics.reconciles.inc({
        trigger: result.trigger,
        result: result.applied.length > 0 ? "changed" : "unchanged",
      });
      // every pass (anti-entropy too) plans the rejections of the config in force: the gauge stays
      // up while an entry stays rejected, and drops when it is fixed or removed
      this.#metrics.configRejectedNow.set(
        result.plan.actions.filter((action) => action.kind === "reject").length,
      );
    });
    events.on("reconcile:failed", (event) =>
      this.#metrics.reconciles.inc({ trigger: event.trigger, result: "failed" }),
    );
    events.on("config:loaded", () => {
      this.#metrics.configReloads.inc({ result: "loaded" });
      this.#metrics.configSourceUp.set(1);
    });
    events.on("config:error", () => {
      this.#metrics.configReloads.inc({ result: "error" });
      this.#metrics.configSourceUp.set(0);
    });
    events.on("config:rejected", () => this.#metrics.configRejected.inc());
  }

  #track(task: string, key: string, running: boolean): void {
    let keys = this.#inProgress.get(task);
    if (!keys) {
      keys = new Set();
      this.#inProgress.set(task, keys);
    }
    if (running) keys.add(key);
    else keys.delete(key);
    this.#metrics.runsInProgress.set({ task }, keys.size);
  }
}

/**
 * One attempt of one run (slot, start, attempt): not the handler's `ctx.runKey`, which names the
 * slot alone and is the same for every attempt and re-run of it.
 */
function attemptKey(event: { scheduledAt: Date; startedAt: Date; attempt: number }): string {
  return `${event.scheduledAt.getTime()}|${event.startedAt.getTime()}|${event.attempt}`;
}

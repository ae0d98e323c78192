import { describe, expect, it } from "vitest";
import type { DesiredState, DesiredTask, RejectedEntry } from "../../src/config/desiredState.js";
import { type LiveJob, planReconcile } from "../../src/reconcile/reconcilePlan.js";

const registered = new Set(["report", "cleanup", "digest"]);

function desired(tasks: DesiredTask[], rejected: RejectedEntry[] = []): DesiredState {
  return {
    tasks,
    rejected,
    source: "file tasks.yaml",
    revision: "r1",
    document: null,
    confirmDisableAll: false,
  };
}
function task(name: string, overrides: Partial<DesiredTask> = {}): DesiredTask {
  return { name, enabled: true, cron: "*/5 * * * *", timezone: "UTC", ...overrides };
}
function job(name: string, overrides: Partial<LiveJob> = {}): LiveJob {
  return {
    name,
    disabled: false,
    cron: "*/5 * * * *",
    timezone: "UTC",
    nextRunAt: new Date("2026-03-01T00:05:00Z"),
    ...overrides,
  };
}

describe("planReconcile (docs/design.md, Reconcile choices)", () => {
  it("rule 1: an entry whose name is not registered is rejected, the other entries proceed", () => {
    const plan = planReconcile(desired([task("nope"), task("report")]), [], registered);
    expect(plan.actions).toContainEqual({
      kind: "reject",
      task: "nope",
      reason: expect.stringContaining("no task of that name is registered in code"),
    });
    expect(plan.actions).toContainEqual(expect.objectContaining({ kind: "create", task: "report" }));
  });

  it("rule 2: an invalid entry is rejected and its task keeps its job untouched (not disabled as missing)", () => {
    const rejected: RejectedEntry = {
      index: 0,
      name: "report",
      field: "cron",
      value: "*/61 * * * *",
      reason: "step",
    };
    const plan = planReconcile(desired([], [rejected]), [job("report")], registered);
    expect(plan.actions).toEqual([
      {
        kind: "reject",
        task: "report",
        reason: 'config tasks[0] "report": cron "*/61 * * * *" is invalid: step',
      },
    ]);
  });

  it("rule 3: no job for a task -> create it, enabled or disabled as configured", () => {
    const plan = planReconcile(
      desired([task("report"), task("cleanup", { enabled: false })]),
      [],
      registered,
    );
    expect(plan.actions).toEqual([
      {
        kind: "create",
        task: "report",
        cron: "*/5 * * * *",
        timezone: "UTC",
        enabled: true,
        reason: 'no job yet for "report"',
      },
      {
        kind: "create",
        task: "cleanup",
        cron: "*/5 * * * *",
        timezone: "UTC",
        enabled: false,
        reason: 'no job yet for "cleanup"',
      },
    ]);
  });

  it("rule 4: enabled false -> disable (never delete)", () => {
    const plan = planReconcile(desired([task("report", { enabled: false })]), [job("report")], registered);
    expect(plan.actions).toEqual([{ kind: "disable", task: "report", reason: "disabled in the config" }]);
  });

  it("rule 5: enabled true on a disabled job -> enable", () => {
    const plan = planReconcile(desired([task("report")]), [job("report", { disabled: true })], registered);
    expect(plan.actions).toEqual([{ kind: "enable", task: "report", reason: "enabled in the config" }]);
  });

  it("rule 6: a cron or timezone change -> one in-place update naming both changes", () => {
    const plan = planReconcile(
      desired([task("report", { cron: "0 * * * *", timezone: "Asia/Shanghai" })]),
      [job("report")],
      registered,
    );
    expect(plan.actions).toEqual([
      {
        kind: "update",
        task: "report",
        cron: "0 * * * *",
        timezone: "Asia/Shanghai",
        changes: [
          { field: "cron", from: "*/5 * * * *", to: "0 * * * *" },
          { field: "timezone", from: "UTC", to: "Asia/Shanghai" },
        ],
        reason: "cron */5 * * * * -> 0 * * * *, timezone UTC -> Asia/Shanghai",
      },
    ]);
  });

  it("a job stored without a timezone gets the desired one written (the stored timezone is never left empty)", () => {
    const plan = planReconcile(desired([task("report")]), [job("report", { timezone: null })], registered);
    expect(plan.actions).toEqual([
      expect.objectContaining({ kind: "update", changes: [{ field: "timezone", from: null, to: "UTC" }] }),
    ]);
  });

  it("an update and an enable for the same task are planned update first", () => {
    const plan = planReconcile(
      desired([task("report", { cron: "0 * * * *" })]),
      [job("report", { disabled: true })],
      registered,
    );
    expect(plan.actions.map((action) => action.kind)).toEqual(["update", "enable"]);
  });

  it("an enabled job that lost its next run is re-timed from now", () => {
    const plan = planReconcile(desired([task("report")]), [job("report", { nextRunAt: null })], registered);
    expect(plan.actions).toEqual([
      expect.objectContaining({
        kind: "update",
        changes: [{ field: "nextRunAt", from: null, to: "next slot from now" }],
      }),
    ]);
  });

  it("choice: a registered task missing from the config is disabled, not deleted; without a job nothing is created", () => {
    const plan = planReconcile(desired([task("report")]), [job("report"), job("cleanup")], registered);
    expect(plan.actions).toEqual([
      {
        kind: "disable",
        task: "cleanup",
        reason: expect.stringContaining('"cleanup" is registered but not in the config from file tasks.yaml'),
      },
    ]);
    expect(plan.unchanged).toEqual(["report"]);
  });

  it("choice: a job row whose task is not registered is left untouched and reported", () => {
    const plan = planReconcile(desired([task("report")]), [job("report"), job("legacyTask")], registered);
    expect(plan.actions).toEqual([
      {
        kind: "orphan",
        task: "legacyTask",
        reason: expect.stringContaining("no task of that name is registered"),
      },
    ]);
  });

  it("a job that already matches needs no action", () => {
    const plan = planReconcile(desired([task("report")]), [job("report")], registered);
    expect(plan).toEqual({ actions: [], unchanged: ["report"] });
  });

  it("a disabled job missing from the config stays as it is", () => {
    const plan = planReconcile(desired([]), [job("digest", { disabled: true })], registered);
    expect(plan.actions).toEqual([]);
  });
});

describe("planReconcile: catchUp policy", () => {
  const all = { windowMs: 6 * 3_600_000, runs: "all" as const };

  it("stores a stated policy that differs from the row's, without re-timing the job", () => {
    const plan = planReconcile(desired([task("report", { catchUp: all })]), [job("report")], registered);
    expect(plan.actions).toEqual([
      {
        kind: "policy",
        task: "report",
        catchUp: all,
        from: { windowMs: 3_600_000, runs: "latest" },
        reason: "catchUp { window: 1h, runs: latest } -> { window: 6h, runs: all }",
      },
    ]);
  });

  it("a row without a stored policy and an entry without one are both the default: unchanged", () => {
    const plan = planReconcile(desired([task("report")]), [job("report")], registered);
    expect(plan.actions).toEqual([]);
    expect(plan.unchanged).toEqual(["report"]);
  });

  it("an entry that drops its policy returns the row to the default", () => {
    const plan = planReconcile(desired([task("report")]), [job("report", { catchUp: all })], registered);
    expect(plan.actions).toEqual([
      expect.objectContaining({ kind: "policy", catchUp: { windowMs: 3_600_000, runs: "latest" } }),
    ]);
  });

  it("a new job with a stated policy is created, then given it", () => {
    const plan = planReconcile(desired([task("report", { catchUp: all })]), [], registered);
    expect(plan.actions.map((action) => action.kind)).toEqual(["create", "policy"]);
  });
});

describe("planReconcile: at: one-shots", () => {
  const now = new Date("2026-12-01T00:00:00Z");
  const oneShot = (at: string) => task("report", { cron: `at ${at}`, at });

  it("an `at` in the past is refused, with the field, the value and the reason", () => {
    const plan = planReconcile(desired([oneShot("2026-11-30T03:00:00.000Z")]), [], registered, now);
    expect(plan.actions).toEqual([
      {
        kind: "reject",
        task: "report",
        reason: expect.stringMatching(/at "2026-11-30T03:00:00.000Z" is invalid: is in the past/),
      },
    ]);
  });

  it("a one-shot the task already holds stays, even once past: it has run and is completed, not lost", () => {
    const held = job("report", { cron: "at 2026-11-30T03:00:00.000Z", nextRunAt: null });
    const plan = planReconcile(desired([oneShot("2026-11-30T03:00:00.000Z")]), [held], registered, now);
    expect(plan.actions).toEqual([]);
    expect(plan.unchanged).toEqual(["report"]);
  });

  it("a new future time re-arms it", () => {
    const held = job("report", { cron: "at 2026-11-30T03:00:00.000Z", nextRunAt: null });
    const plan = planReconcile(desired([oneShot("2026-12-02T03:00:00.000Z")]), [held], registered, now);
    expect(plan.actions).toEqual([
      expect.objectContaining({ kind: "update", cron: "at 2026-12-02T03:00:00.000Z" }),
    ]);
  });
});

describe("planReconcile: jitter", () => {
  it("stores a changed jitter without re-timing the schedule", () => {
    const plan = planReconcile(desired([task("report", { jitterMs: 30_000 })]), [job("report")], registered);
    expect(plan.actions).toEqual([
      { kind: "jitter", task: "report", jitterMs: 30_000, fromMs: 0, reason: "jitter none -> 30s" },
    ]);
    expect(
      planReconcile(
        desired([task("report", { jitterMs: 30_000 })]),
        [job("report", { jitterMs: 30_000 })],
        registered,
      ).actions,
    ).toEqual([]);
  });
});

describe("pause on failure (docs/behaviour.md, Pause on failure)", () => {
  const pause = {
    at: new Date("2026-03-01T00:10:00Z"),
    failures: 3,
    slot: new Date("2026-03-01T00:10:00Z"),
    lastError: "partner API answered 503",
  };
  const paused = (overrides: Partial<LiveJob> = {}) =>
    job("report", { disabled: true, pauseOnFailure: 3, pausedByFailure: pause, ...overrides });

  it("a paused task whose entry did not change stays disabled: no enable, not drift", () => {
    const plan = planReconcile(desired([task("report", { pauseOnFailure: 3 })]), [paused()], registered);
    expect(plan.actions).toEqual([]);
    expect(plan.unchanged).toEqual(["report"]);
  });

  it("a paused task whose next run is null is not 'repaired' either", () => {
    const plan = planReconcile(
      desired([task("report", { pauseOnFailure: 3 })]),
      [paused({ nextRunAt: null })],
      registered,
    );
    expect(plan.actions).toEqual([]);
  });

  it("a change of its cron resumes it first, then re-times it", () => {
    const plan = planReconcile(
      desired([task("report", { pauseOnFailure: 3, cron: "*/10 * * * *" })]),
      [paused()],
      registered,
    );
    expect(plan.actions.map((action) => action.kind)).toEqual(["resume", "update"]);
    expect(plan.actions[0]).toEqual({
      kind: "resume",
      task: "report",
      enabled: true,
      pause,
      reason: "paused by failure; its config entry changed (cron */5 * * * * -> */10 * * * *): resumed",
    });
  });

  it.each([
    ["timezone", { timezone: "Europe/Paris" }, "update"],
    ["catchUp", { catchUp: { windowMs: 6 * 3_600_000, runs: "all" as const } }, "policy"],
    ["overlap", { overlap: "queueOne" as const }, "overlap"],
    ["jitter", { jitterMs: 30_000 }, "jitter"],
    ["pauseOnFailure", { pauseOnFailure: 5 }, "pauseOnFailure"],
    ["pauseOnFailure removed", { pauseOnFailure: undefined }, "pauseOnFailure"],
  ])("a change of %s resumes it", (_field, change, kind) => {
    const plan = planReconcile(
      desired([task("report", { pauseOnFailure: 3, ...change })]),
      [paused()],
      registered,
    );
    expect(plan.actions.map((action) => action.kind)).toEqual(["resume", kind]);
    expect(plan.actions[0]).toMatchObject({ kind: "resume", enabled: true });
  });

  it("enabled toggled: false clears the pause and leaves it disabled; true then enables it as usual", () => {
    const off = planReconcile(
      desired([task("report", { pauseOnFailure: 3, enabled: false })]),
      [paused()],
      registered,
    );
    expect(off.actions).toEqual([
      {
        kind: "resume",
        task: "report",
        enabled: false,
        pause,
        reason:
          "paused by failure and disabled in the config: the pause is cleared, the task stays disabled until the config enables it",
      },
    ]);
    // once cleared, the row is an ordinary disabled one
    const on = planReconcile(
      desired([task("report", { pauseOnFailure: 3 })]),
      [job("report", { disabled: true, pauseOnFailure: 3 })],
      registered,
    );
    expect(on.actions).toEqual([{ kind: "enable", task: "report", reason: "enabled in the config" }]);
  });

  it("an entry that leaves the config clears the pause; the task stays disabled", () => {
    const plan = planReconcile(desired([task("cleanup")]), [paused(), job("cleanup")], registered);
    expect(plan.actions).toEqual([
      expect.objectContaining({ kind: "resume", task: "report", enabled: false }),
    ]);
  });

  it("a refused entry keeps the pause (the task keeps its last valid state)", () => {
    const rejected: RejectedEntry = { index: 0, name: "report", field: "cron", value: "bad", reason: "x" };
    const plan = planReconcile(desired([], [rejected]), [paused()], registered);
    expect(plan.actions.map((action) => action.kind)).toEqual(["reject"]);
  });

  it("pauseOnFailure is stored like the other policies: on create and when it changes", () => {
    const created = planReconcile(desired([task("report", { pauseOnFailure: 3 })]), [], registered);
    expect(created.actions).toContainEqual({
      kind: "pauseOnFailure",
      task: "report",
      pauseOnFailure: 3,
      from: null,
      reason: "pauseOnFailure never -> after 3 failed slot(s)",
    });
    const unchanged = planReconcile(
      desired([task("report", { pauseOnFailure: 3 })]),
      [job("report", { pauseOnFailure: 3 })],
      registered,
    );
    expect(unchanged.actions).toEqual([]);
    const removed = planReconcile(
      desired([task("report")]),
      [job("report", { pauseOnFailure: 3 })],
      registered,
    );
    expect(removed.actions).toEqual([
      {
        kind: "pauseOnFailure",
        task: "report",
        pauseOnFailure: null,
        from: 3,
        reason: "pauseOnFailure after 3 failed slot(s) -> never",
      },
    ]);
  });
});

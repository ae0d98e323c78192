import { describe, expect, it } from "vitest";
import { describeRejection, parseDesiredState } from "../../src/config/desiredState.js";
import { decideDependency } from "../../src/core/dependencies/decide.js";
import { checkDependencyGraph } from "../../src/core/dependencies/graph.js";
import { parseWaitAtMost } from "../../src/core/dependencies/spec.js";
import { planReconcile } from "../../src/reconcile/reconcilePlan.js";

/** The pure parts of task dependencies (docs/dependencies.md), with literal inputs. */

const options = {
  defaultTimezone: "UTC",
  rules: { minIntervalMs: 60_000 },
  now: new Date("2026-03-01T00:00:00Z"),
  source: "file tasks.yaml",
  revision: "r1",
};

const DAILY = "0 2 * * *";
const valid = [
  { name: "extractOrders", enabled: true, cron: DAILY, timezone: "Asia/Shanghai" },
  { name: "extractRefunds", enabled: true, cron: DAILY, timezone: "Asia/Shanghai" },
  { name: "heartbeat", enabled: true, cron: "* * * * *" },
];

function parse(tasks: unknown[]) {
  return parseDesiredState({ tasks }, options);
}

function rejectedOf(state: ReturnType<typeof parse>, name: string) {
  return state.rejected.filter((entry) => entry.name === name);
}

describe("dependency entries", () => {
  it("accepts the issue's example: a downstream runs for its upstreams' shared slots", () => {
    const state = parse([
      ...valid,
      {
        name: "buildDailyReport",
        enabled: true,
        after: ["extractOrders", "extractRefunds"],
        when: "allSucceeded",
        waitAtMost: "3h",
      },
    ]);
    expect(state.rejected).toEqual([]);
    expect(state.tasks.find((task) => task.name === "buildDailyReport")).toEqual({
      name: "buildDailyReport",
      enabled: true,
      cron: DAILY,
      timezone: "Asia/Shanghai",
      after: {
        upstreams: ["extractOrders", "extractRefunds"],
        when: "allSucceeded",
        waitAtMost: "3h",
        waitAtMostMs: 3 * 3_600_000,
      },
    });
  });

  it("chains inherit the root's schedule; when defaults to allSucceeded", () => {
    const state = parse([
      ...valid,
      { name: "b", enabled: true, after: ["extractOrders"] },
      { name: "c", enabled: true, after: ["b"], when: "allDone" },
    ]);
    expect(state.rejected).toEqual([]);
    const c = state.tasks.find((task) => task.name === "c");
    expect(c).toMatchObject({
      cron: DAILY,
      timezone: "Asia/Shanghai",
      after: { upstreams: ["b"], when: "allDone" },
    });
    expect(state.tasks.find((task) => task.name === "b")?.after?.when).toBe("allSucceeded");
  });

  const cases: {
    title: string;
    entries: unknown[];
    rejected: string;
    field: string;
    reason: RegExp;
    /** Upstreams the entry names, for the case alone. */
    needs?: unknown[];
  }[] = [
    {
      title: "a cycle, with its chain",
      entries: [
        { name: "a", enabled: true, after: ["b"] },
        { name: "b", enabled: true, after: ["a"] },
      ],
      rejected: "a",
      field: "after",
      reason: /^cycle a -> b -> a: /,
    },
    {
      title: "a task waiting for itself",
      entries: [{ name: "self", enabled: true, after: ["self"] }],
      rejected: "self",
      field: "after",
      reason: /^cycle self -> self: /,
    },
    {
      title: "an unknown upstream",
      entries: [{ name: "orphanDown", enabled: true, after: ["nosuchTask"] }],
      rejected: "orphanDown",
      field: "after",
      reason: /^upstream "nosuchTask" is not in the config: orphanDown cannot wait for it/,
    },
    {
      title: "an upstream rejected in the same document",
      entries: [
        { name: "broken", enabled: true, cron: "*/61 * * * *" },
        { name: "afterBroken", enabled: true, after: ["broken"] },
      ],
      rejected: "afterBroken",
      field: "after",
      reason: /^upstream "broken" is rejected in this document \(tasks\[\d+\]\)/,
    },
    {
      title: "after together with cron",
      entries: [{ name: "both", enabled: true, cron: DAILY, after: ["extractOrders"] }],
      rejected: "both",
      field: "after",
      reason: /^is given together with cron "0 2 \* \* \*"/,
    },
    {
      title: "after together with every",
      entries: [{ name: "afterEvery", enabled: true, every: "15m", after: ["extractOrders"] }],
      rejected: "afterEvery",
      field: "every",
      reason: /^a task with "after" runs for its upstreams' slots and has no schedule of its own/,
    },
    {
      title: "after with a policy of a schedule of its own",
      entries: [{ name: "afterJitter", enabled: true, jitter: "10s", after: ["extractOrders"] }],
      rejected: "afterJitter",
      field: "jitter",
      reason: /^applies to a task with a schedule of its own; a task with "after" runs once per slot/,
    },
    {
      title: "an empty after",
      entries: [{ name: "empty", enabled: true, after: [] }],
      rejected: "empty",
      field: "after",
      reason: /^is empty: list at least one upstream task/,
    },
    {
      title: "upstreams on different schedules",
      entries: [{ name: "mixed", enabled: true, after: ["extractOrders", "heartbeat"] }],
      needs: [valid[0], valid[2]],
      rejected: "mixed",
      field: "after",
      reason:
        /^upstreams run on different schedules: extractOrders on "0 2 \* \* \*" \(Asia\/Shanghai\); heartbeat on "\* \* \* \* \*" \(UTC\)/,
    },
    {
      title: "a bad when",
      entries: [{ name: "badWhen", enabled: true, after: ["extractOrders"], when: "sometimes" }],
      rejected: "badWhen",
      field: "when",
      reason: /must be one of allSucceeded, allDone, anyFailed/,
    },
    {
      title: "a bad waitAtMost",
      entries: [{ name: "badWait", enabled: true, after: ["extractOrders"], waitAtMost: "3 hours" }],
      rejected: "badWait",
      field: "waitAtMost",
      reason: /must be a duration such as 30s, 90m, 3h/,
    },
    {
      title: "waitAtMost without after",
      entries: [{ name: "stray", enabled: true, cron: DAILY, waitAtMost: "3h" }],
      rejected: "stray",
      field: "waitAtMost",
      reason: /applies only to a task with "after/,
    },
    {
      title: "neither cron nor after",
      entries: [{ name: "nothing", enabled: true }],
      rejected: "nothing",
      field: "cron",
      reason: /a schedule is required: cron .*, every .* or at .*, or "after: \[upstream, ...\]"/,
    },
  ];

  for (const example of cases) {
    it(`rejects ${example.title} alone`, () => {
      const state = parse([...(example.needs ?? []), ...example.entries]);
      expect(state.tasks).toHaveLength((example.needs ?? []).length); // nothing of the case is applied
      const rejection = rejectedOf(state, example.rejected)[0];
      expect(rejection).toMatchObject({ field: example.field });
      expect(rejection?.reason).toMatch(example.reason);
    });

    it(`rejects ${example.title} and applies the valid entries of the same document`, () => {
      const state = parse([...valid, ...example.entries]);
      const rejection = rejectedOf(state, example.rejected)[0];
      expect(rejection).toMatchObject({ field: example.field });
      expect(rejection?.reason).toMatch(example.reason);
      expect(describeRejection(rejection as NonNullable<typeof rejection>)).toContain(
        `"${example.rejected}"`,
      );
      expect(state.tasks.map((task) => task.name)).toEqual(
        expect.arrayContaining(["extractOrders", "extractRefunds", "heartbeat"]),
      );
      expect(state.tasks.some((task) => task.name === example.rejected)).toBe(false);
    });
  }

  it("rejects what waits on a cycle, naming the rejected upstream, and keeps the rest", () => {
    const state = parse([
      ...valid,
      { name: "a", enabled: true, after: ["b"] },
      { name: "b", enabled: true, after: ["a"] },
      { name: "behind", enabled: true, after: ["a"] },
      { name: "fine", enabled: true, after: ["heartbeat"] },
    ]);
    expect(rejectedOf(state, "behind")[0]?.reason).toMatch(
      /^upstream "a" is rejected \(see its entry\), so a -> behind/,
    );
    expect(rejectedOf(state, "b")[0]?.reason).toMatch(/^cycle b -> a -> b/);
    expect(state.tasks.map((task) => task.name)).toContain("fine");
  });
});

describe("checkDependencyGraph", () => {
  it("a chain thousands deep does not overflow the stack", () => {
    const nodes = [{ name: "n0", cron: "* * * * *", timezone: "UTC" }];
    for (let index = 1; index < 20_000; index++)
      nodes.push({ name: `n${index}`, after: [`n${index - 1}`] } as never);
    const check = checkDependencyGraph(nodes);
    expect(check.problems.size).toBe(0);
    expect(check.schedules.get("n19999")).toEqual({ cron: "* * * * *", timezone: "UTC" });
  });

  it("a wide fan-out and a huge after list are checked in linear time (hostile documents)", () => {
    const started = Date.now();
    const wide = [{ name: "root", cron: "* * * * *", timezone: "UTC" }];
    for (let index = 0; index < 50_000; index++) wide.push({ name: `d${index}`, after: ["root"] } as never);
    expect(checkDependencyGraph(wide).downstreams.get("root")).toHaveLength(50_000);
    const names = Array.from({ length: 50_000 }, (_, index) => `u${index}`);
    const state = parse([{ name: "huge", enabled: true, after: names }]);
    expect(state.rejected[0]?.reason).toMatch(/^upstream "u0" is not in the config/);
    expect(Date.now() - started).toBeLessThan(5_000);
  });

  it("a long cycle is named in full", () => {
    const check = checkDependencyGraph([
      { name: "x", after: ["z"] },
      { name: "y", after: ["x"] },
      { name: "z", after: ["y"] },
    ]);
    expect(check.problems.get("x")).toMatch(/^cycle x -> z -> y -> x/);
  });

  it("fan-out: one upstream, several downstreams", () => {
    const check = checkDependencyGraph([
      { name: "a", cron: "0 * * * *", timezone: "UTC" },
      { name: "b", after: ["a"] },
      { name: "c", after: ["a"] },
    ]);
    expect(check.downstreams.get("a")).toEqual(["b", "c"]);
  });
});

describe("decideDependency", () => {
  const s = (name: string, standing: "succeeded" | "failed" | "skipped" | "pending" | "disabled") => ({
    name,
    standing,
  });
  it("waits while an upstream is pending", () => {
    expect(decideDependency("allSucceeded", [s("a", "succeeded"), s("b", "pending")])).toEqual({
      kind: "wait",
      pending: ["b"],
    });
  });
  it("allSucceeded: runs when all succeeded, skips naming the failed or skipped upstream", () => {
    expect(decideDependency("allSucceeded", [s("a", "succeeded"), s("b", "succeeded")])).toEqual({
      kind: "run",
    });
    expect(decideDependency("allSucceeded", [s("a", "succeeded"), s("extractOrders", "failed")])).toEqual({
      kind: "skip",
      skip: "upstream_failed",
      reason: "upstream extractOrders failed",
    });
    expect(decideDependency("allSucceeded", [s("a", "skipped")])).toMatchObject({
      reason: "upstream a skipped",
    });
  });
  it("allDone runs on any settled outcomes; anyFailed needs a failure", () => {
    expect(decideDependency("allDone", [s("a", "failed"), s("b", "skipped")])).toEqual({ kind: "run" });
    expect(decideDependency("anyFailed", [s("a", "failed"), s("b", "succeeded")])).toEqual({ kind: "run" });
    expect(decideDependency("anyFailed", [s("a", "succeeded")])).toMatchObject({
      kind: "skip",
      skip: "no_upstream_failed",
    });
  });
  it("a disabled upstream skips at once, even with another pending", () => {
    expect(decideDependency("allDone", [s("a", "pending"), s("b", "disabled")])).toEqual({
      kind: "skip",
      skip: "upstream_disabled",
      reason: "upstream b disabled",
    });
  });
});

describe("parseWaitAtMost", () => {
  it("reads units and sums", () => {
    expect(parseWaitAtMost("3h")).toEqual({ ok: true, ms: 10_800_000 });
    expect(parseWaitAtMost("1h30m")).toEqual({ ok: true, ms: 5_400_000 });
    expect(parseWaitAtMost("500ms")).toEqual({ ok: true, ms: 500 });
    expect(parseWaitAtMost("0s")).toMatchObject({ ok: false });
    expect(parseWaitAtMost("40d")).toMatchObject({ ok: false, reason: "must be at most 31d" });
    expect(parseWaitAtMost("soon")).toMatchObject({ ok: false });
  });
});

describe("planReconcile with dependencies", () => {
  const spec = { upstreams: ["a"], when: "allSucceeded" as const, waitAtMost: null, waitAtMostMs: null };
  const desired = parse([
    { name: "a", enabled: true, cron: "0 * * * *" },
    { name: "b", enabled: true, after: ["a"] },
  ]);
  const registered = new Set(["a", "b"]);

  it("creates a downstream's row with its spec", () => {
    const plan = planReconcile(desired, [], registered);
    expect(plan.actions).toContainEqual(expect.objectContaining({ kind: "create", task: "b", after: spec }));
  });

  it("leaves a matching downstream row alone, even without a next run", () => {
    const plan = planReconcile(
      desired,
      [
        { name: "a", disabled: false, cron: "0 * * * *", timezone: "UTC", nextRunAt: new Date() },
        { name: "b", disabled: false, cron: null, timezone: null, nextRunAt: null, after: spec },
      ],
      registered,
    );
    expect(plan.unchanged.sort()).toEqual(["a", "b"]);
  });

  it("re-pointing after is an update of the field after", () => {
    const plan = planReconcile(
      desired,
      [
        { name: "a", disabled: false, cron: "0 * * * *", timezone: "UTC", nextRunAt: new Date() },
        {
          name: "b",
          disabled: false,
          cron: null,
          timezone: null,
          nextRunAt: null,
          after: { ...spec, upstreams: ["x"] },
        },
      ],
      registered,
    );
    expect(plan.actions).toContainEqual(
      expect.objectContaining({
        kind: "update",
        task: "b",
        changes: [{ field: "after", from: "after [x] when allSucceeded", to: "after [a] when allSucceeded" }],
      }),
    );
  });

  it("rejects a downstream whose upstream is not registered, naming it", () => {
    const plan = planReconcile(desired, [], new Set(["b"]));
    expect(plan.actions).toContainEqual({
      kind: "reject",
      task: "b",
      reason: expect.stringMatching(
        /^config entry "b" is rejected: after upstream "a" is not registered in code/,
      ),
    });
    expect(plan.actions.some((action) => action.kind === "create")).toBe(false);
  });
});

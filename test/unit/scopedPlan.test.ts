import { describe, expect, it } from "vitest";
import type { DesiredState, DesiredTask, RejectedEntry } from "../../src/config/desiredState.js";
import { sameValue } from "../../src/core/sameValue.js";
import { type LiveJob, planReconcile } from "../../src/reconcile/reconcilePlan.js";
import { changedTasks } from "../../src/reconcile/scopedPlan.js";

function desired(tasks: DesiredTask[], rejected: RejectedEntry[] = []): DesiredState {
  return { tasks, rejected, source: "test", revision: "r", document: null, confirmDisableAll: false };
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
    nextRunAt: new Date(0),
    ...overrides,
  };
}
const many = (count: number) => Array.from({ length: count }, (_, index) => task(`t${index}`));

describe("changedTasks: the tasks a new snapshot changed (src/reconcile/scopedPlan.ts)", () => {
  it("names the edited, added and removed entries; equal entries are not changed", () => {
    const before = desired([...many(300), task("gone")]);
    const after = desired([
      ...many(300).map((each) => (each.name === "t7" ? { ...each, cron: "0 * * * *" } : each)),
      task("new"),
    ]);
    expect(changedTasks(before, after)).toEqual(new Set(["t7", "new", "gone"]));
    expect(changedTasks(before, desired([...many(300), task("gone")]))).toEqual(new Set());
  });

  it("the same task object at the same place is unchanged; moved or rebuilt equal entries are compared by value", () => {
    const tasks = many(300);
    const moved = [...tasks.slice(1), tasks[0] as DesiredTask];
    expect(changedTasks(desired(tasks), desired(moved))).toEqual(new Set());
    const rebuilt = tasks.map((each) => ({ ...each }));
    expect(changedTasks(desired(tasks), desired(rebuilt))).toEqual(new Set());
    const edited = [...tasks];
    edited[5] = task("t5", { enabled: false });
    edited.push(task("t-new"));
    expect(changedTasks(desired(tasks), desired(edited.slice(1)))).toEqual(new Set(["t0", "t5", "t-new"]));
  });

  it("compares every field, nested ones included", () => {
    const base = task("a", {
      catchUp: { windowMs: 60_000, runs: "latest" },
      exclude: [{ name: "h", dates: ["2026-12-25"] }],
    });
    const edits: Partial<DesiredTask>[] = [
      { enabled: false },
      { timezone: "Europe/Paris" },
      { catchUp: { windowMs: 60_000, runs: "all" } },
      { exclude: [{ name: "h", dates: ["2026-12-26"] }] },
      { jitterMs: 1000 },
      { overlap: "queueOne" },
      { after: { upstreams: ["b"], when: "success" } as unknown as DesiredTask["after"] },
    ];
    for (const edit of edits)
      expect(changedTasks(desired([base]), desired([{ ...base, ...edit }]))).toEqual(new Set(["a"]));
    expect(changedTasks(desired([base]), desired([structuredClone(base)]))).toEqual(new Set());
  });

  it("plans everything instead after refused entries, with one-shots, or when many changed", () => {
    const refused: RejectedEntry = { index: 0, name: "x", field: "cron", value: "?", reason: "bad" };
    expect(changedTasks(desired(many(3), [refused]), desired(many(3)))).toBeUndefined();
    expect(changedTasks(desired(many(3)), desired(many(3), [refused]))).toBeUndefined();
    expect(
      changedTasks(desired(many(3)), desired([task("t0", { at: "2030-01-01T00:00:00.000Z" })])),
    ).toBeUndefined();
    const edited = (count: number) =>
      desired(many(2_000).map((each, index) => (index < count ? { ...each, enabled: false } : each)));
    expect(changedTasks(desired(many(2_000)), edited(200))?.size).toBe(200);
    expect(changedTasks(desired(many(2_000)), edited(201))).toBeUndefined();
  });

  it("sameValue: plain values, arrays, objects (an undefined key is an absent one), dates", () => {
    expect(sameValue({ a: 1, b: undefined }, { a: 1 })).toBe(true);
    expect(sameValue({ a: [1, { b: "c" }] }, { a: [1, { b: "c" }] })).toBe(true);
    expect(sameValue({ a: [1] }, { a: [1, 2] })).toBe(false);
    expect(sameValue({ a: [] }, { a: {} })).toBe(false);
    expect(sameValue(new Date(1), new Date(1))).toBe(true);
    expect(sameValue(new Date(1), new Date(2))).toBe(false);
    expect(sameValue(null, {})).toBe(false);
  });
});

describe("planReconcile with a scope", () => {
  const registered = new Set(["a", "b", "c", "d"]);

  it("plans only the tasks in scope; the others are unchanged, a registered task left out of scope is not disabled", () => {
    const plan = planReconcile(
      desired([task("a", { cron: "0 * * * *" }), task("b"), task("c")]),
      [job("a")],
      registered,
      new Date(),
      new Set(["a"]),
    );
    expect(plan.actions).toEqual([expect.objectContaining({ kind: "update", task: "a" })]);
    expect(plan.unchanged.sort()).toEqual(["b", "c"]);
  });

  it("a task in scope and out of the config is disabled; refusals are reported for every entry", () => {
    const plan = planReconcile(
      desired([task("a"), task("nope")]),
      [job("d")],
      registered,
      new Date(),
      new Set(["d"]),
    );
    expect(plan.actions).toContainEqual(expect.objectContaining({ kind: "disable", task: "d" }));
    expect(plan.actions).toContainEqual(expect.objectContaining({ kind: "reject", task: "nope" }));
    expect(plan.actions.filter((action) => action.task === "a")).toEqual([]);
  });
});

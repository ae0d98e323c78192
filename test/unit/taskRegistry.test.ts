import { describe, expect, it } from "vitest";
import { TaskRegistry } from "../../src/scheduler/taskRegistry.js";

const handler = async () => {};

describe("TaskRegistry", () => {
  it("registers, looks up and lists tasks by name", () => {
    const registry = new TaskRegistry();
    registry.register({ name: "b", handler });
    registry.register({ name: "a", handler, description: "first" });
    expect(registry.get("a")?.description).toBe("first");
    expect(registry.has("c")).toBe(false);
    expect(registry.list().map((task) => task.name)).toEqual(["a", "b"]);
  });

  it("refuses a duplicate name, naming both registrations", () => {
    const registry = new TaskRegistry();
    registry.register({ name: "report", handler }, "tasks/a.ts:3");
    expect(() => registry.register({ name: "report", handler }, "tasks/b.ts:7")).toThrow(
      'task "report" is registered twice: first at tasks/a.ts:3, again at tasks/b.ts:7; task names must be unique',
    );
  });

  it("records where register() was called", () => {
    const registry = new TaskRegistry();
    const task = registry.register({ name: "here", handler });
    expect(task.registeredAt).toMatch(/test\/unit\/taskRegistry\.test\.ts:\d+$/);
  });

  it("refuses bad names, missing handlers and registrations after start", () => {
    const registry = new TaskRegistry();
    expect(() => registry.register({ name: "has space", handler })).toThrow(
      /task name "has space" .* is invalid/,
    );
    expect(() => registry.register({ name: "x", handler: undefined as never })).toThrow(
      /has no handler function/,
    );
    registry.seal();
    expect(() => registry.register({ name: "late", handler })).toThrow(/after the scheduler started/);
  });
});

import { EventEmitter } from "node:events";
import { describe, expect, it } from "vitest";
import { callListener, guardHooks, ListenerFailures, safeEmit } from "../../src/core/safeEmit.js";
import { Subscriptions } from "../../src/scheduler/eventSubscriptions.js";
import type { SchedulerEvents } from "../../src/scheduler/events.js";
import { LogCapture } from "../helpers/logs.js";
import { pollUntil } from "../helpers/poll.js";

describe("safeEmit", () => {
  it("calls every listener although earlier ones throw or reject, and logs each listener's first failure per event", async () => {
    const logs = new LogCapture();
    const failures = new ListenerFailures(logs.logger, "listener");
    const called: string[] = [];
    const throws = () => {
      called.push("throws");
      throw new Error("sync");
    };
    const rejects = async () => {
      called.push("rejects");
      throw new Error("async");
    };
    const fine = () => called.push("fine");
    for (let round = 0; round < 2; round++) {
      expect(safeEmit([throws, rejects, fine], "run:started", undefined, [], failures)).toBe(true);
    }
    safeEmit([throws], "run:finished", undefined, [], failures);
    expect(called).toEqual(["throws", "rejects", "fine", "throws", "rejects", "fine", "throws"]);
    await pollUntil("the rejections reported", () => logs.lines.length >= 5, { intervalMs: 5 });
    const errors = logs.lines.filter((line) => line.level === 50).map((line) => [line.event, line.listener]);
    expect(errors.sort()).toEqual([
      ["run:finished", "throws"],
      ["run:started", "rejects"],
      ["run:started", "throws"],
    ]);
    expect(logs.lines.filter((line) => line.level === 20)).toHaveLength(2);
    expect(safeEmit([], "run:started", undefined, [], failures)).toBe(false);
  });

  it("an onError that throws is dropped; guarded hooks keep their names and arguments", () => {
    expect(() =>
      callListener(
        () => {
          throw new Error("listener");
        },
        undefined,
        [],
        () => {
          throw new Error("reporter");
        },
      ),
    ).not.toThrow();
    const logs = new LogCapture();
    const seen: unknown[] = [];
    const hooks = guardHooks(
      {
        runStarted: (value: number) => {
          seen.push(value);
          throw new Error("hook");
        },
      },
      new ListenerFailures(logs.logger, "hook"),
    );
    expect(() => hooks.runStarted(7)).not.toThrow();
    expect(seen).toEqual([7]);
    expect(logs.lines[0]).toMatchObject({ level: 50, event: "runStarted" });
    expect(guardHooks(undefined, new ListenerFailures(logs.logger, "hook"))).toEqual({});
  });

  it("Subscriptions report an async listener's rejection to onError instead of leaving it unhandled", async () => {
    const emitter = new EventEmitter<SchedulerEvents>();
    const errors: Array<[string, string]> = [];
    const subscriptions = new Subscriptions(emitter, (event, error) =>
      errors.push([event, (error as Error).message]),
    );
    subscriptions.on("lock:renewed", async () => {
      throw new Error("async subscriber");
    });
    subscriptions.on("lock:renewed", () => {
      throw new Error("sync subscriber");
    });
    emitter.emit("lock:renewed", { taskName: "t" });
    await pollUntil("the rejection reported", () => errors.length >= 2, { intervalMs: 5 });
    expect(errors.sort()).toEqual([
      ["lock:renewed", "async subscriber"],
      ["lock:renewed", "sync subscriber"],
    ]);
    subscriptions.close();
    expect(emitter.listenerCount("lock:renewed")).toBe(0);
  });
});

import { setTimeout as sleep } from "node:timers/promises";
import { describe, expect, it } from "vitest";
import { systemClock } from "../../src/core/clock.js";
import { LockLostError, RunTimeoutError, superviseRun } from "../../src/engine/runSupervisor.js";

function supervise(
  run: (signal: AbortSignal) => Promise<void>,
  options: { timeoutMs?: number; graceMs?: number; lockLost?: Promise<string> } = {},
) {
  const controller = new AbortController();
  const events = { lockLost: [] as string[], abandoned: [] as string[] };
  const result = superviseRun({
    taskName: "task",
    startedAt: new Date(),
    run: () => run(controller.signal),
    abort: (reason) => controller.abort(reason),
    lockLost: options.lockLost ?? new Promise(() => {}),
    timeoutMs: options.timeoutMs,
    graceMs: options.graceMs ?? 1000,
    onLockLost: (reason) => events.lockLost.push(reason),
    onAbandoned: (reason) => events.abandoned.push(reason),
  });
  return { result, events, signal: controller.signal };
}

/** The options a test of the run's start does not look at: no timeout, no lock loss, no-op callbacks. */
function inertOptions() {
  return {
    taskName: "task",
    abort: () => {},
    lockLost: new Promise<string>(() => {}),
    timeoutMs: undefined,
    graceMs: 1000,
    onLockLost: () => {},
    onAbandoned: () => {},
  };
}

describe("superviseRun", () => {
  it("reports the handler's own success or failure", async () => {
    expect(await supervise(async () => {}).result).toMatchObject({ outcome: "succeeded" });
    const failed = await supervise(async () => {
      throw new Error("boom");
    }).result;
    expect(failed).toMatchObject({ outcome: "failed", error: new Error("boom") });
    const thrownNothing = await supervise(() => Promise.reject(undefined)).result;
    expect(thrownNothing.error?.message).toBe('task "task" failed without an error value');
  });

  it("calls the handler first, then `started`, in the same turn; a handler's synchronous throw fails the run", async () => {
    const order: string[] = [];
    const started = () => order.push("started");
    const common = { ...inertOptions(), startedAt: new Date(), started };
    const result = superviseRun({
      ...common,
      run: async () => {
        order.push("handler");
        await sleep(1);
        order.push("handler settled");
      },
    });
    expect(order).toEqual(["handler", "started"]);
    expect(await result).toMatchObject({ outcome: "succeeded" });
    expect(order).toEqual(["handler", "started", "handler settled"]);

    order.length = 0;
    const thrown = await superviseRun({
      ...common,
      run: () => {
        order.push("handler");
        throw new Error("sync boom");
      },
    });
    expect(thrown).toMatchObject({ outcome: "failed", error: new Error("sync boom") });
    expect(order).toEqual(["handler", "started"]);
  });

  it("with quietMs, `started` and the end wait that long after the call; the duration is the handler's", async () => {
    let clock = 1_000;
    const order: string[] = [];
    const result = superviseRun({
      ...inertOptions(),
      startedAt: new Date(clock),
      clock: { ...systemClock, now: () => clock },
      run: async () => {
        order.push("handler");
        clock += 3; // the handler settles 3 ms after its start
      },
      started: () => {
        order.push("started");
        clock += 40; // the bookkeeping comes later
      },
      quietMs: 30,
    });
    expect(order).toEqual(["handler"]); // not in the handler's turn
    // the end is reported after `started`, and measured when the handler settled
    expect(await result).toMatchObject({ outcome: "succeeded", durationMs: 3 });
    expect(order).toEqual(["handler", "started"]);
  });

  it("a timeout fires the signal and fails the run, once a handler that honours it has settled", async () => {
    let settledAt = 0;
    const { result, signal } = supervise(
      async (sig) => {
        await sleep(10_000, undefined, { signal: sig }).catch(() => {});
        settledAt = Date.now();
      },
      { timeoutMs: 100 },
    );
    const outcome = await result;
    expect(outcome.error).toBeInstanceOf(RunTimeoutError);
    expect(outcome.error?.message).toBe("timed out after 0.1 s");
    expect(signal.reason).toBeInstanceOf(RunTimeoutError);
    expect(settledAt).toBeGreaterThan(0);
  });

  it("a handler that ignores the signal is waited for (the lock stays held) until it settles within the grace", async () => {
    let settled = false;
    const { result, events } = supervise(
      async () => {
        await sleep(400);
        settled = true;
      },
      { timeoutMs: 100, graceMs: 2000 },
    );
    const outcome = await result;
    expect(settled).toBe(true);
    expect(outcome.error?.message).toBe("timed out after 0.1 s");
    expect(events.abandoned).toEqual([]);
  });

  it("past the grace, a handler that ignores the signal is abandoned loudly", async () => {
    const { result, events } = supervise(() => sleep(3000), { timeoutMs: 100, graceMs: 200 });
    const outcome = await result;
    expect(outcome.error?.message).toMatch(
      /^timed out after 0.1 s and ignored its abort signal for 0.2 s more/,
    );
    expect(events.abandoned).toHaveLength(1);
  });

  it("a lost lock fires the signal and fails the run at once", async () => {
    let lose: (reason: string) => void = () => {};
    const lockLost = new Promise<string>((resolve) => {
      lose = resolve;
    });
    const { result, events, signal } = supervise(() => sleep(3000), { lockLost });
    lose("taken over");
    const outcome = await result;
    expect(outcome.error).toBeInstanceOf(LockLostError);
    expect(outcome.error?.message).toBe("lock lost: taken over");
    expect(signal.aborted).toBe(true);
    expect(events.lockLost).toEqual(["taken over"]);
  });
});

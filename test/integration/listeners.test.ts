import { afterAll, beforeAll, expect, it } from "vitest";
import { AgendaEngine } from "../../src/engine/agendaEngine.js";
import { readRuns } from "../../src/status/runReads.js";
import { createTestDatabase, type TestDatabase } from "../helpers/database.js";
import { SchedulerHarness } from "../helpers/harness.js";
import type { LogLine } from "../helpers/logs.js";
import { LogCapture } from "../helpers/logs.js";
import { pollUntil } from "../helpers/poll.js";

/**
 * A listener or hook that throws, or rejects, never fails a run or the scheduler; it is logged at
 * error level once per listener and event (src/core/safeEmit.ts), later failures at debug level.
 * An unguarded rejection would fail this file (vitest reports unhandled rejections as errors).
 */

let db: TestDatabase;

beforeAll(async () => {
  db = await createTestDatabase();
});

afterAll(async () => {
  await db?.drop();
});

const ERROR = 50;
const DEBUG = 20;

function failuresOf(lines: LogLine[], event: string, listener: string, level: number): LogLine[] {
  return lines.filter((line) => line.event === event && line.listener === listener && line.level === level);
}

it("listeners that throw or reject on run:started and run:finished: runs still succeed and are recorded, the scheduler goes on, each failure is logged once", async () => {
  const harness = SchedulerHarness.create(db.pool, [{ name: "ls-task", handler: async () => {} }]);
  const scheduler = harness.scheduler;
  const finishedSeen: string[] = [];
  scheduler.on("run:started", function throwsOnStart() {
    throw new Error("listener bug on start");
  });
  scheduler.on("run:finished", function throwsOnFinish() {
    throw new Error("listener bug on finish");
  });
  scheduler.on("run:finished", async function rejectsOnFinish() {
    throw new Error("async listener bug on finish");
  });
  // called although listeners before it threw
  scheduler.on("run:finished", (event) => finishedSeen.push(event.outcome));
  // the start's own events: a throw there must not fail start()
  scheduler.on("config:loaded", function throwsOnLoad() {
    throw new Error("listener bug on config");
  });
  scheduler.on("reconciled", function throwsOnReconcile() {
    throw new Error("listener bug on reconcile");
  });
  scheduler.on("slot:locked", async function rejectsOnLock() {
    throw new Error("async listener bug on lock");
  });
  await harness.writeRaw('tasks:\n  - name: ls-task\n    enabled: true\n    cron: "* * * * * *"\n');
  await scheduler.start();

  // bounded by the database's record: three runs recorded, each succeeded
  const runs = await pollUntil("three recorded runs", async () => {
    const recorded = await scheduler.runs("ls-task");
    return recorded.length >= 3 ? recorded : undefined;
  });
  expect(runs.slice(0, 3).map((run) => run.outcome)).toEqual(["succeeded", "succeeded", "succeeded"]);
  await pollUntil("the listener after the throwing ones called", () => finishedSeen.length >= 3);
  expect(finishedSeen.slice(0, 3)).toEqual(["succeeded", "succeeded", "succeeded"]);
  expect(await scheduler.readiness()).toMatchObject({ ready: true, workersStarted: true });

  const lines = harness.logs.lines;
  // logged once per listener and event, with the event's name and the error; later ones at debug level
  for (const [event, listener, message] of [
    ["run:started", "throwsOnStart", "listener bug on start"],
    ["run:finished", "throwsOnFinish", "listener bug on finish"],
    ["run:finished", "rejectsOnFinish", "async listener bug on finish"],
  ] as const) {
    const errors = failuresOf(lines, event, listener, ERROR);
    expect(errors).toHaveLength(1);
    expect(errors[0]?.msg).toContain(`a "${event}" listener failed: ${message}`);
    expect((errors[0]?.err as { message?: string })?.message).toBe(message);
    expect(failuresOf(lines, event, listener, DEBUG).length).toBeGreaterThanOrEqual(2);
  }
  expect(failuresOf(lines, "config:loaded", "throwsOnLoad", ERROR)).toHaveLength(1);
  expect(failuresOf(lines, "reconciled", "throwsOnReconcile", ERROR)).toHaveLength(1);
  expect(failuresOf(lines, "slot:locked", "rejectsOnLock", ERROR)).toHaveLength(1);
  expect(lines.filter((line) => (line.level ?? 0) >= ERROR && line.event === undefined)).toEqual([]);

  const stopped = await scheduler.stop();
  expect(stopped.abandoned).toEqual([]);
  await harness.stop();
});

it("engine hooks (EngineOptions.hooks) that throw or reject never fail a run", async () => {
  const logs = new LogCapture();
  let handled = 0;
  const engine = new AgendaEngine({
    pool: db.pool,
    instanceId: "hooks",
    processEveryMs: 200,
    lockLifetimeMs: 10_000,
    livenessCheckMs: 0,
    logger: logs.logger,
    hooks: {
      slotLocked() {
        throw new Error("hook bug on lock");
      },
      runStarted() {
        throw new Error("hook bug on start");
      },
      async runFinished() {
        throw new Error("async hook bug on finish");
      },
    },
  });
  await engine.prepare();
  engine.defineTask("ls-hooked", async () => {
    handled += 1;
  });
  await engine.createJob("ls-hooked", "0 0 1 1 *", "UTC", true);
  await db.pool.query("UPDATE agenda_jobs SET next_run_at = now() WHERE name = 'ls-hooked'");
  await engine.start();
  try {
    const [run] = await pollUntil("the hooked run recorded", async () => {
      const recorded = await readRuns(db.pool, "ls-hooked");
      return recorded.length > 0 ? recorded : undefined;
    });
    expect(run?.outcome).toBe("succeeded");
    expect(handled).toBe(1);
    for (const [hook, message] of [
      ["runStarted", "hook bug on start"],
      ["runFinished", "async hook bug on finish"],
    ] as const) {
      const line = await logs.waitFor(`the ${hook} failure logged`, (entry) => entry.event === hook);
      expect(line.level).toBe(ERROR);
      expect(line.msg).toContain(`a "${hook}" hook failed: ${message}`);
    }
  } finally {
    await engine.drain(5_000);
  }
});

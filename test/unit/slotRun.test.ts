import { describe, expect, it } from "vitest";
import { RUN_DATA_KEY, SlotRun, START_MARGIN_MS } from "../../src/engine/slotRun.js";

const at = (iso: string) => new Date(iso);
const now = at("2026-12-02T10:00:05Z");
const JOB = { id: "7", name: "task" };

describe("SlotRun", () => {
  it("a claim of a row whose last run finished runs the row's next run, fenced on the claim's lock", () => {
    const run = SlotRun.claimed(
      JOB,
      {
        nextRunAt: at("2026-12-02T10:00:00Z"),
        lockedAt: at("2026-12-02T09:59:58Z"),
        lastRunAt: at("2026-12-02T09:59:00Z"),
        lastFinishedAt: at("2026-12-02T09:59:01Z"),
      },
      now,
    );
    expect(run).toMatchObject({
      scheduledAt: at("2026-12-02T10:00:00Z"),
      heldLockAt: at("2026-12-02T09:59:58Z"),
      previousRunUnfinished: false,
      lastRunAtBefore: at("2026-12-02T09:59:00Z"),
      nextRunAtBefore: at("2026-12-02T10:00:00Z"),
    });
    expect(run.deadRun).toBeUndefined();
  });

  it("a claim of a row whose last run never finished takes the dead run's slot from the identity it wrote", () => {
    const run = SlotRun.claimed(
      JOB,
      {
        nextRunAt: at("2026-12-02T10:01:00Z"),
        lastRunAt: at("2026-12-02T10:00:00Z"),
        data: {
          [RUN_DATA_KEY]: {
            slot: "2026-12-02T10:00:00.000Z",
            startedAt: "2026-12-02T10:00:00.004Z",
            instanceId: "a",
          },
        },
      },
      now,
    );
    expect(run.previousRunUnfinished).toBe(true);
    expect(run.scheduledAt).toEqual(at("2026-12-02T10:00:00Z"));
    expect(run.deadRun).toEqual({
      scheduledAt: at("2026-12-02T10:00:00Z"),
      startedAt: at("2026-12-02T10:00:00.004Z"),
      instanceId: "a",
    });
    // the slot still owed after it, if the dead run had finished its own
    expect(run.nextRunAtBefore).toEqual(at("2026-12-02T10:01:00Z"));
  });

  it("a row without a next run or a dead run's identity runs at the claim time", () => {
    const run = SlotRun.claimed(
      JOB,
      { nextRunAt: null, lastRunAt: at("2026-12-02T09:00:00Z"), data: {} },
      now,
    );
    expect(run.scheduledAt).toEqual(now);
    expect(run.deadRun).toBeUndefined();
  });

  it("a re-run takes the slot of the run it repeats; an ordinary run keeps its own", () => {
    const rerun = SlotRun.claimed(JOB, { nextRunAt: at("2026-12-02T10:01:00Z") }, now);
    rerun.repeats({
      scheduledAt: at("2026-12-02T10:00:00Z"),
      startedAt: at("2026-12-02T10:00:01Z"),
      instanceId: "b",
    });
    expect(rerun).toMatchObject({ rerun: true, scheduledAt: at("2026-12-02T10:00:00Z") });
    const ordinary = SlotRun.claimed(JOB, { nextRunAt: at("2026-12-02T10:01:00Z") }, now);
    ordinary.repeats(undefined);
    expect(ordinary).toMatchObject({ rerun: false, scheduledAt: at("2026-12-02T10:01:00Z") });
  });

  it("the row read back by the start save is taken once", () => {
    const run = SlotRun.claimed(JOB, { nextRunAt: now }, now);
    const row = { disabled: false, repeat_interval: "* * * * *", repeat_timezone: "UTC" };
    run.startSaved(row);
    expect(run.takeRowAtStart()).toEqual(row);
    expect(run.takeRowAtStart()).toBeUndefined();
  });

  it("holds the lock time: a renewal moves it, a release clears it, and the start deadline follows it", () => {
    const run = SlotRun.claimed(JOB, { nextRunAt: now, lockedAt: now }, now);
    expect(run).toMatchObject({ jobId: "7", taskName: "task", heldLockAt: now });
    expect(run.startDeadline(15_000, 0)).toBe(now.getTime() + 15_000 - START_MARGIN_MS);
    const renewed = at("2026-12-02T10:00:10Z");
    run.renewed(renewed);
    expect(run.heldLockAt).toEqual(renewed);
    expect(run.startDeadline(15_000, 0)).toBe(renewed.getTime() + 15_000 - START_MARGIN_MS);
    run.fenced(undefined);
    expect(run.heldLockAt).toBeUndefined();
    // without a lock of its own the deadline counts from `now`
    expect(run.startDeadline(15_000, 1_000)).toBe(1_000 + 15_000 - START_MARGIN_MS);
  });

  it("a cut-off that the run outlives is an ordinary end", () => {
    const run = SlotRun.claimed(JOB, { nextRunAt: now, lockedAt: now }, now);
    run.starting(now);
    run.cutOff();
    expect(run.cutOffAtShutdown).toBe(true);
    run.endedAfterCutOff();
    expect(run.cutOffAtShutdown).toBe(false);
  });
});

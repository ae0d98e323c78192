import { describe, expect, it } from "vitest";
import { RunLedger } from "../../src/engine/runLedger.js";
import { RUN_DATA_KEY, SlotRun } from "../../src/engine/slotRun.js";

const at = (iso: string) => new Date(iso);
const now = at("2026-12-02T10:00:05Z");

describe("SlotRun", () => {
  it("a claim of a row whose last run finished runs the row's next run, fenced on the claim's lock", () => {
    const run = SlotRun.claimed(
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
    const run = SlotRun.claimed({ nextRunAt: null, lastRunAt: at("2026-12-02T09:00:00Z"), data: {} }, now);
    expect(run.scheduledAt).toEqual(now);
    expect(run.deadRun).toBeUndefined();
  });

  it("a re-run takes the slot of the run it repeats; an ordinary run keeps its own", () => {
    const rerun = SlotRun.claimed({ nextRunAt: at("2026-12-02T10:01:00Z") }, now);
    rerun.repeats({
      scheduledAt: at("2026-12-02T10:00:00Z"),
      startedAt: at("2026-12-02T10:00:01Z"),
      instanceId: "b",
    });
    expect(rerun).toMatchObject({ rerun: true, scheduledAt: at("2026-12-02T10:00:00Z") });
    const ordinary = SlotRun.claimed({ nextRunAt: at("2026-12-02T10:01:00Z") }, now);
    ordinary.repeats(undefined);
    expect(ordinary).toMatchObject({ rerun: false, scheduledAt: at("2026-12-02T10:01:00Z") });
  });

  it("the row read back by the start save is taken once", () => {
    const run = SlotRun.claimed({ nextRunAt: now }, now);
    const row = { disabled: false, repeat_interval: "* * * * *", repeat_timezone: "UTC" };
    run.startSaved(row);
    expect(run.takeRowAtStart()).toEqual(row);
    expect(run.takeRowAtStart()).toBeUndefined();
  });

  it("a job run again clears what its previous run left, but keeps its lock and start plan", () => {
    const ledger = new RunLedger();
    const claimed = ledger.claimed("7", { nextRunAt: now, lockedAt: now });
    claimed.planned({ kind: "on-time", nextAfter: now.getTime() }, now);
    claimed.settle("failed", "boom");
    claimed.outcomeRecorded();
    claimed.cutOff();
    claimed.notStartedAfterAll();
    const started = ledger.starting("7", at("2026-12-02T10:00:06Z"));
    expect(started).toBe(claimed);
    expect(started).toMatchObject({
      attempt: 1,
      startedAt: at("2026-12-02T10:00:06Z"),
      outcome: undefined,
      detail: undefined,
      recorded: false,
      handedOff: false,
      notStarted: false,
      heldLockAt: now,
      catchUp: { kind: "on-time", nextAfter: now.getTime() },
    });
  });

  it("the ledger's claim time is its clock's", () => {
    const ledger = new RunLedger(() => now.getTime());
    expect(ledger.claimed("9", { nextRunAt: null }).scheduledAt).toEqual(now);
  });

  it("a run whose claim went unseen starts a run of its own in the ledger", () => {
    const ledger = new RunLedger();
    const started = ledger.starting("8", now);
    expect(ledger.get("8")).toBe(started);
    expect(started).toMatchObject({ scheduledAt: now, heldLockAt: undefined, previousRunUnfinished: false });
    ledger.forget("8");
    expect(ledger.get("8")).toBeUndefined();
  });
});

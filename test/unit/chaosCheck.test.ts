import { describe, expect, it } from "vitest";
import {
  type AuditRow,
  type CheckInput,
  checkRecord,
  type HandlerRun,
  type LogRow,
  type ProcessRecord,
} from "../../chaos/lib/check.js";
import { HOSTILE_KINDS, initialState, renderHostile, revisionOf } from "../../chaos/lib/documents.js";
import { createRandom } from "../../chaos/lib/random.js";

/** The chaos run's verdict (chaos/lib/check.ts) on hand-made records: each invariant can fail. */

const T0 = Date.parse("2030-01-01T00:00:00.000Z");
const s = (seconds: number) => T0 + seconds * 1000;

const created = (task: string, cron: string): AuditRow[] => [
  { task, at: s(-1), field: "job", newValue: "created", revision: "r0" },
  { task, at: s(-1), field: "cron", newValue: cron, revision: "r0" },
  { task, at: s(-1), field: "enabled", newValue: "true", revision: "r0" },
];
const process = (
  instance: string,
  end: ProcessRecord["end"] = "stopped",
  endedAt = s(100),
): ProcessRecord => ({
  label: instance.split(":")[0] as string,
  pid: Number(instance.split(":")[1]),
  instance,
  spawnedAt: s(-5),
  readyAt: s(-2),
  endedAt,
  end,
  code: end === "stopped" ? 0 : null,
  signal: end === "killed" ? "SIGKILL" : null,
});
const run = (slot: number, instance = "i1:1", extra: Partial<HandlerRun> = {}): HandlerRun => ({
  task: "t",
  slot,
  instance,
  pid: Number(instance.split(":")[1]),
  attempt: 1,
  startedAt: slot + 20,
  finishedAt: slot + 500,
  error: null,
  rerunOf: null,
  ...extra,
});
const row = (event: string, slot: number | null, instance = "i1:1", extra: Partial<LogRow> = {}): LogRow => ({
  task: "t",
  event,
  timestamp: (slot ?? s(0)) + (event === "start" ? 19 : 500),
  slot,
  instance,
  outcome: event === "success" ? "succeeded" : event === "fail" ? "failed" : null,
  rerun: false,
  duplicateOf: false,
  error: event === "fail" ? "boom" : null,
  ...extra,
});
/** A task every 5 s over 0..30 s, each slot run once on i1. */
function healthy(): CheckInput {
  const slots = [0, 5, 10, 15, 20, 25].map(s);
  return {
    handlerRuns: slots.map((slot) => run(slot)),
    logRows: slots.flatMap((slot) => [row("start", slot), row("success", slot)]),
    audit: created("t", "*/5 * * * * *"),
    processes: [process("i1:1"), process("i2:2")],
    pgDown: [],
    hostileRevisions: new Map(),
    checkFrom: s(0),
    checkUntil: s(29),
    changeToleranceMs: 2000,
    takeoverWindowMs: 14_000,
    unhandledRejections: 0,
  };
}

describe("chaos run verdict", () => {
  it("passes a clean record and counts its slots", () => {
    const verdict = checkRecord(healthy());
    expect(verdict.violations).toEqual([]);
    expect(verdict.figures).toMatchObject({ slotsDue: 6, succeeded: 6, runs: 6, lost: 0, duplicates: 0 });
  });

  it("finds a lost slot, and accepts one covered by a late run (catch-up policy)", () => {
    const input = healthy();
    input.handlerRuns = input.handlerRuns.filter((handler) => handler.slot !== s(10));
    input.logRows = input.logRows.filter((log) => log.slot !== s(10));
    const lost = checkRecord(input);
    expect(lost.figures.lost).toBe(1);
    expect(lost.violations.map((violation) => violation.invariant)).toEqual([
      expect.stringMatching(/^lost slots/),
    ]);

    // the run of slot 5 s started late, at 11 s: Agenda computed its next slot then, so 10 s is skipped by design
    const late = input.handlerRuns.find((handler) => handler.slot === s(5)) as HandlerRun;
    late.startedAt = s(11);
    const caughtUp = checkRecord(input);
    expect(caughtUp.violations).toEqual([]);
    expect(caughtUp.figures).toMatchObject({ caughtUp: 1, caughtUpDeadWindow: 0, lost: 0 });
    input.pgDown = [{ from: s(9), to: s(11) }];
    expect(checkRecord(input).figures.caughtUpDeadWindow).toBe(1);
  });

  it("finds overlapping executions and a slot run to success twice", () => {
    const input = healthy();
    input.handlerRuns.push(run(s(10), "i2:2", { startedAt: s(10) + 100 }));
    const verdict = checkRecord(input);
    expect(verdict.figures.duplicates).toBe(1); // one slot: overlapping, and succeeded twice (not a re-run)
    expect(verdict.violations[0]?.examples[0]).toMatch(/^t: i1:1 ran slot 2030-01-01T00:00:10.000Z/);
  });

  it("accepts the re-run of a slot whose instance was killed, and requires it", () => {
    const input = healthy();
    input.processes = [process("i1:1"), process("i3:3", "killed", s(11))];
    input.handlerRuns = input.handlerRuns.filter((handler) => handler.slot !== s(10));
    input.logRows = input.logRows.filter((log) => log.slot !== s(10));
    input.handlerRuns.push(run(s(10), "i3:3", { finishedAt: null }));
    const notRerun = checkRecord(input);
    expect(notRerun.violations.map((violation) => violation.invariant)).toEqual([
      expect.stringMatching(/^killed runs not re-run/),
    ]);
    expect(notRerun.figures.interrupted).toBe(1);
    // disabled before its dead lock could be taken over: an interrupt, not a missing re-run
    const disabled = structuredClone(input);
    disabled.audit.push({ task: "t", at: s(13), field: "enabled", newValue: "false", revision: "r1" });
    expect(checkRecord(disabled).violations).toEqual([]);

    input.handlerRuns.push(run(s(10), "i1:1", { startedAt: s(18), finishedAt: s(19), rerunOf: s(10) }));
    input.logRows.push(row("start", s(10), "i1:1", { timestamp: s(18) - 1, rerun: true }));
    input.logRows.push(row("success", s(10), "i1:1", { timestamp: s(19), rerun: true }));
    const rerun = checkRecord(input);
    expect(rerun.violations).toEqual([]);
    expect(rerun.figures).toMatchObject({ reruns: 1, succeeded: 6 });
  });

  it("finds a fail row without a handler start, and a start row naming another slot", () => {
    const input = healthy();
    input.logRows.push(row("fail", s(15), "i2:2", { error: "connect ECONNREFUSED" }));
    input.logRows.push(row("fail", null, "i2:2"));
    const start = input.logRows.find((log) => log.event === "start" && log.slot === s(20)) as LogRow;
    start.slot = s(25);
    const verdict = checkRecord(input);
    expect(verdict.figures).toMatchObject({ phantomFailures: 2, mislabelledStarts: 1 });

    // the same slot run later on that instance does not make an earlier fail row true
    input.handlerRuns.push(run(s(15), "i2:2", { startedAt: s(17), finishedAt: s(18), rerunOf: s(15) }));
    expect(checkRecord(input).figures.phantomFailures).toBe(2);
  });

  it("counts crashes, unclean stops and applied hostile documents", () => {
    const input = healthy();
    input.processes.push(process("i3:3", "crashed", s(12)), { ...process("i2:9"), code: 1 });
    input.hostileRevisions.set("bad", "fleet-typo");
    input.audit.push({ task: "t", at: s(28), field: "enabled", newValue: "false", revision: "bad" });
    const verdict = checkRecord(input);
    expect(verdict.figures).toMatchObject({ crashes: 2, hostileApplied: 1 });
  });

  it("follows the audit trail: no slot is due while disabled, and a still-pending slot is superseded by a change", () => {
    const input = healthy();
    input.audit.push({ task: "t", at: s(12), field: "enabled", newValue: "false", revision: "r1" });
    input.handlerRuns = input.handlerRuns.filter((handler) => handler.slot <= s(5));
    input.logRows = input.logRows.filter((log) => (log.slot ?? 0) <= s(5));
    const verdict = checkRecord(input);
    expect(verdict.violations).toEqual([]);
    expect(verdict.figures).toMatchObject({ slotsDue: 3, succeeded: 2, superseded: 1 });
  });
});

describe("chaos documents", () => {
  it("are the same for the same seed, and every hostile kind renders", () => {
    const one = createRandom(7);
    const two = createRandom(7);
    const state = initialState(20, one);
    expect(initialState(20, two)).toEqual(state);
    for (const kind of HOSTILE_KINDS) {
      const a = renderHostile(kind, state, one);
      const b = renderHostile(kind, state, two);
      expect(revisionOf(a)).toBe(revisionOf(b));
      expect(a.length).toBeGreaterThan(0);
    }
  });
});

import { setTimeout as sleep } from "node:timers/promises";
import { describe, expect, it } from "vitest";
import type { RunStartedEvent } from "../../src/index.js";
import { harnessSuite, pollUntil } from "../helpers/harness.js";

/** More due runs than workers, and more tasks than one statement can audit (docs/benchmarks.md). */

const suite = harnessSuite();
/** The start-ahead at a 1 s lock lifetime: a tenth of it (src/engine/agendaEngine.ts startAheadOf). */
const START_AHEAD_AT_1S_LOCK_MS = 100;

describe("a herd larger than the instance's workers", () => {
  it("runs every task of the slot, including those whose pre-taken lock expired while they waited", async () => {
    // The claim loop locks every job due within the look-ahead. With 2 workers and runs of 2.5 s,
    // two of the four jobs wait for a worker past their 1 s lock lifetime: on deck (start-saved,
    // the watchdog renewing their lock) or, dropped when their lock expired, claimed again; either
    // way they run for the same slot, not stranded on this instance.
    const names = ["herd-a", "herd-b", "herd-c", "herd-d"];
    const starts: RunStartedEvent[] = [];
    const lockAtStart = new Map<string, { lockedAt: Date; slot: Date }>();
    const h = await suite.start(
      names.map((name) => ({
        name,
        handler: async (ctx) => {
          const { rows } = await suite
            .db()
            .pool.query<{ locked_at: Date }>("SELECT locked_at FROM agenda_jobs WHERE name = $1", [name]);
          lockAtStart.set(name, { lockedAt: rows[0]?.locked_at ?? new Date(0), slot: ctx.scheduledAt });
          await sleep(2_500);
        },
      })),
      names.map((name) => ({ name, cron: "*/10 * * * * *" })),
      { maxConcurrency: 2, lockLifetimeMs: 1_000, processEveryMs: 500 },
    );
    h.scheduler.on("run:started", (event) => starts.push(event));

    const slotOf = (name: string) => starts.find((event) => event.taskName === name)?.scheduledAt.getTime();
    await pollUntil(
      "a run of each of the four tasks",
      () => names.every((name) => slotOf(name) !== undefined),
      {
        timeoutMs: 25_000,
      },
    );
    const firstSlot = Math.min(...names.map((name) => slotOf(name) ?? Number.POSITIVE_INFINITY));
    for (const name of names) expect(slotOf(name), name).toBe(firstSlot);

    // all four ran once for that slot, at most two at a time
    await h.runsOf("herd-d", 1, 20_000).catch(() => {}); // herd-d may have finished already
    const ofSlot = starts.filter((event) => event.scheduledAt.getTime() === firstSlot);
    expect(ofSlot.map((event) => event.taskName).sort()).toEqual(names);
    const byStart = [...ofSlot].sort((a, b) => a.startedAt.getTime() - b.startedAt.getTime());
    expect(byStart[2]?.startedAt.getTime() ?? 0).toBeGreaterThanOrEqual(
      (byStart[0]?.startedAt.getTime() ?? 0) + 2_000,
    );
    // every run starts with a fresh lock, not the one taken ahead of the slot (which can be
    // nearly expired by then, and the watchdog's first renewal is a third of a lifetime away):
    // the start save's, which at a 1 s lock lifetime comes at most 100 ms before the slot
    // (docs/design.md, "The start-ahead"), or later for a run that waited for a worker
    for (const name of names) {
      const seen = lockAtStart.get(name);
      expect(seen?.lockedAt.getTime(), name).toBeGreaterThanOrEqual(
        (seen?.slot.getTime() ?? Infinity) - START_AHEAD_AT_1S_LOCK_MS - 5,
      );
    }
  });
});

describe("a herd of quick handlers, more than the instance's workers", () => {
  it("never runs more handlers at once than maxConcurrency, though runs wait on deck; each task once per slot", async () => {
    // with handlers of 20 ms, due runs go on deck (their start save made while the handlers ahead
    // run: docs/design.md, "Workers and the deck"); only the worker each asks for before its
    // handler keeps them to two at once
    const names = Array.from({ length: 30 }, (_, index) => `quick-${String(index).padStart(2, "0")}`);
    let going = 0;
    let mostGoing = 0;
    const starts: { task: string; slot: number }[] = [];
    await suite.start(
      names.map((name) => ({
        name,
        handler: async (ctx) => {
          starts.push({ task: name, slot: ctx.scheduledAt.getTime() });
          going += 1;
          mostGoing = Math.max(mostGoing, going);
          await sleep(20);
          going -= 1;
        },
      })),
      names.map((name) => ({ name, cron: "*/5 * * * * *" })),
      { maxConcurrency: 2, processEveryMs: 500 },
    );
    // two whole slots: the second comes after handlers have ended, so the deck is open for it
    const slots = () => [...new Set(starts.map((start) => start.slot))].sort((a, b) => a - b);
    const slotsRun = () =>
      slots().filter((slot) => starts.filter((start) => start.slot === slot).length >= 30);
    await pollUntil("two slots that all 30 tasks ran for", () => slotsRun().length >= 2, {
      timeoutMs: 30_000,
    });
    expect(mostGoing).toBe(2);
    for (const slot of slotsRun()) {
      const tasks = starts.filter((start) => start.slot === slot).map((start) => start.task);
      expect(tasks.sort()).toEqual(names);
    }
  });
});

describe("a config of thousands of tasks", () => {
  it("creates 2,000 jobs on an empty database and audits all 8,000 fields (more than one INSERT can carry)", async () => {
    const names = Array.from({ length: 2_000 }, (_, index) => `bulk-${String(index).padStart(4, "0")}`);
    const h = await suite.start(
      names.map((name) => ({ name, handler: async () => {} })),
      names.map((name) => ({ name, cron: "0 0 0 1 1 *" })),
      { namespace: "bulk" },
    );
    const { rows } = await suite
      .db()
      .pool.query<{ count: string }>(
        "SELECT count(*) FROM cronwarden_audit WHERE namespace = 'bulk' AND task LIKE 'bulk-%'",
      );
    expect(Number(rows[0]?.count)).toBe(8_000);
    const jobs = await suite
      .db()
      .pool.query<{ count: string }>("SELECT count(*) FROM agenda_jobs WHERE name LIKE 'bulk-%'");
    expect(Number(jobs.rows[0]?.count)).toBe(2_000);

    // a change of every cron is audited too, one row per task
    const result = await h.writeConfig(names.map((name) => ({ name, cron: "0 30 0 1 1 *" })));
    expect(result.applied).toHaveLength(2_000);
    const changed = await suite
      .db()
      .pool.query<{ count: string }>(
        "SELECT count(*) FROM cronwarden_audit WHERE namespace = 'bulk' AND field = 'cron' AND new_value = '0 30 0 1 1 *'",
      );
    expect(Number(changed.rows[0]?.count)).toBe(2_000);
  });
});

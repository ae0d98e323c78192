import { setTimeout as sleep } from "node:timers/promises";
import { expect, it } from "vitest";
import { QUIET_AFTER_SLOT_MS } from "../../src/engine/slotWait.js";
import type { RunStartedEvent } from "../../src/index.js";
import { harnessSuite, pollUntil } from "../helpers/harness.js";

/**
 * A run claimed ahead of its slot makes its start save and checks before the slot, and its handler
 * waits for the slot (src/engine/claimLoop.ts, startAheadMs): the database round trip is no longer
 * between the slot and the handler. Agenda's record of the run's start is the slot, and its next run
 * the slot after it, never the same slot again.
 */

const SLOTS = 5;

const suite = harnessSuite();

it("a run claimed ahead saves its start before its slot, calls its handler at the slot, and runs each slot once", async () => {
  const started: RunStartedEvent[] = [];
  /** The job row as each handler saw it when it started. */
  const rows: { scheduledAt: number; enteredAt: number; lockedAt: number; lastRunAt: number }[] = [];
  const harness = await suite.start(
    [
      {
        name: "ahead",
        handler: async (context) => {
          const enteredAt = Date.now();
          const { rows: found } = await suite
            .db()
            .pool.query<{ locked_at: Date; last_run_at: Date }>(
              "SELECT locked_at, last_run_at FROM agenda_jobs WHERE name = 'ahead'",
            );
          const row = found[0];
          if (!row) throw new Error("no job row");
          rows.push({
            scheduledAt: context.scheduledAt.getTime(),
            enteredAt,
            lockedAt: row.locked_at.getTime(),
            lastRunAt: row.last_run_at.getTime(),
          });
        },
      },
    ],
    [{ name: "ahead", cron: "*/2 * * * * *" }],
    // a 1 s poll: claimed 0.25-1.25 s ahead of each slot, handed over 125 ms ahead
    { minIntervalMs: 2000, processEveryMs: 1000 },
  );
  /** When each slot's run:started event came (the run's bookkeeping). */
  const reported = new Map<number, number>();
  harness.scheduler.on("run:started", (event) => {
    started.push(event);
    reported.set(event.scheduledAt.getTime(), Date.now());
  });
  await pollUntil(
    "the runs and their run:started events",
    () => rows.length >= SLOTS && rows.every((run) => reported.has(run.scheduledAt)),
    { timeoutMs: (SLOTS + 4) * 2000 },
  );
  const measured = rows.slice(1); // the first may be the start's catch-up of a slot due at once
  for (const run of measured) {
    // never before its slot, and the start Agenda recorded is the slot itself
    expect(run.enteredAt).toBeGreaterThanOrEqual(run.scheduledAt);
    expect(run.lastRunAt).toBe(run.scheduledAt);
  }
  // the start save (it wrote the lock the handler sees) came before the slot for the runs claimed
  // ahead; a loaded machine may claim one late, so not every one is required to
  const savedAhead = measured.filter((run) => run.lockedAt < run.scheduledAt);
  expect(savedAhead.length).toBeGreaterThanOrEqual(Math.ceil(measured.length / 2));
  // a run handed over ahead waits for its slot, then its bookkeeping waits until a quiet spell
  // after the slot (src/engine/slotWait.ts); a timer fires up to a millisecond early by Date
  for (const run of savedAhead)
    expect(reported.get(run.scheduledAt)).toBeGreaterThanOrEqual(run.scheduledAt + QUIET_AFTER_SLOT_MS - 2);
  // each slot once, one after the other
  const slots = started.map((event) => event.scheduledAt.getTime());
  expect(new Set(slots).size).toBe(slots.length);
  const { rows: job } = await suite
    .db()
    .pool.query<{ next_run_at: Date }>("SELECT next_run_at FROM agenda_jobs WHERE name = 'ahead'");
  expect(job[0]?.next_run_at.getTime()).toBeGreaterThan(Math.max(...slots));
  await harness.stop(); // before the next test's scheduler
}, 60_000);

it("a stop whose drain deadline comes while a run waits for its slot: the handler does not start and the slot is given back", async () => {
  const entered: number[] = [];
  const harness = await suite.start(
    [{ name: "cut", handler: async (context) => void entered.push(context.scheduledAt.getTime()) }],
    [{ name: "cut", cron: "*/2 * * * * *" }],
    // the default 5 s poll: handed over 250 ms before each slot
    { minIntervalMs: 2000 },
  );
  // the window between the start save (the row's recorded start is the slot, still ahead) and the
  // slot; polled until caught, slot after slot
  let slot: number | undefined;
  for (let tries = 0; slot === undefined && tries < 3000; tries++) {
    const { rows } = await suite
      .db()
      .pool.query<{ last_run_at: Date | null; locked_at: Date | null }>(
        "SELECT last_run_at, locked_at FROM agenda_jobs WHERE name = 'cut'",
      );
    const row = rows[0];
    if (row?.locked_at && row.last_run_at && row.last_run_at.getTime() > Date.now() + 20)
      slot = row.last_run_at.getTime();
    else await sleep(5);
  }
  if (slot === undefined) throw new Error("never saw a run waiting for its slot");
  const result = await harness.scheduler.stop({ drainTimeoutMs: 0 });
  await sleep(Math.max(0, slot - Date.now()) + 200);
  expect(entered).not.toContain(slot);
  expect(result.handedOff).toEqual(["cut"]);
  const { rows } = await suite
    .db()
    .pool.query<{ locked_at: Date | null; next_run_at: Date }>(
      "SELECT locked_at, next_run_at FROM agenda_jobs WHERE name = 'cut'",
    );
  expect(rows[0]?.locked_at).toBeNull();
  expect(rows[0]?.next_run_at.getTime()).toBe(slot);
  const { rows: logged } = await suite
    .db()
    .pool.query<{ event: string }>("SELECT event FROM agenda_logs WHERE job_name = 'cut' AND event = 'fail'");
  expect(logged).toEqual([]);
}, 60_000);

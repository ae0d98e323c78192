import { afterAll, beforeAll, expect, it } from "vitest";
import type { RunStartedEvent } from "../../src/index.js";
import { createTestDatabase, type TestDatabase } from "../helpers/database.js";
import { pollUntil, SchedulerHarness } from "../helpers/harness.js";

/**
 * A job locked ahead of its slot starts at its slot even when the wall clock (`Date`) falls behind
 * the clock timers run on. Agenda gives a job locked ahead one timer for the time left to its slot;
 * if `Date` says the slot is not there yet when that timer fires (a clock step back, a slew, the
 * millisecond rounding of the two clocks), Agenda queues the job again without a timer and the run
 * waits for the next poll: a minute task started one whole poll late. Here the clock is stepped back
 * by 5 ms after each lock ahead, the way a time daemon corrects it.
 */

// slots every 3 s and a 2 s poll: the poll's phase against the slots moves from one slot to the
// next, so some slots are locked well ahead of their time whatever phase the process starts at
const POLL_MS = 2000;
const SLOTS = 6;
const STEP_BACK_MS = 5;
const RealDate = Date;
let behind = 0;
/** `Date` as the process sees it: the real clock, `behind` ms late. */
class SteppedDate extends RealDate {
  constructor(...args: unknown[]) {
    if (args.length === 0) super(RealDate.now() - behind);
    else super(...(args as [string]));
  }
  static override now(): number {
    return RealDate.now() - behind;
  }
}

let db: TestDatabase;
let harness: SchedulerHarness | undefined;

beforeAll(async () => {
  db = await createTestDatabase();
});

afterAll(async () => {
  globalThis.Date = RealDate;
  await harness?.stop();
  await db?.drop();
});

it("a slot locked ahead starts at its slot when the wall clock steps back meanwhile, not at the next poll", async () => {
  const started: RunStartedEvent[] = [];
  harness = await SchedulerHarness.start(
    db.pool,
    [{ name: "punctual", handler: async () => {} }],
    [{ name: "punctual", cron: "*/3 * * * * *" }],
    { minIntervalMs: 3000, processEveryMs: POLL_MS },
  );
  globalThis.Date = SteppedDate as DateConstructor;
  let steps = 0;
  harness.scheduler.on("slot:locked", ({ scheduledAt }) => {
    if (scheduledAt.getTime() - Date.now() < 150) return;
    // after Agenda has set its timer for this slot, before it fires
    setTimeout(() => {
      behind += STEP_BACK_MS;
      steps += 1;
    }, 50);
  });
  harness.scheduler.on("run:started", (event) => started.push(event));
  await pollUntil("the runs", () => started.length >= SLOTS + 1, { timeoutMs: (SLOTS + 3) * 3000 });
  const lateness = started.slice(1).map((run) => run.startedAt.getTime() - run.scheduledAt.getTime());
  expect(steps).toBeGreaterThan(0);
  // at the next poll a run would be up to 2 s late; at its slot it is a few ms (the bound leaves
  // room for a loaded machine; the exact figures belong in bench/)
  expect(lateness.filter((ms) => ms > 600)).toEqual([]);
}, 60_000);

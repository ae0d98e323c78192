import { expect, it } from "vitest";
import type { RunRecord, SlotsSkippedEvent } from "../../src/index.js";
import { type ConfigEntry, harnessSuite, pollUntil, SchedulerHarness } from "../helpers/harness.js";

/**
 * catchUp against a real PostgreSQL (docs/behaviour.md, "Catch-up"). Downtime is made by stopping
 * the only instance and moving the job's stored slot back (as if it had been down since), so the
 * number of missed slots does not depend on how long the test machine takes.
 */

const suite = harnessSuite();
const db = () => suite.db();
const PERIOD = 2_000;
const CRON = "*/2 * * * * *";
/** A slot more than 1 s late is missed (the grace is max(missedSlotGraceMs, 2 polls)). */
const settings = { missedSlotGraceMs: 1_000 };

async function downtime(name: string, entry: ConfigEntry, missed: number): Promise<Date> {
  const first = await suite.start([{ name, handler: async () => {} }], [entry], settings);
  await first.stop();
  const stored = new Date(Math.floor(Date.now() / PERIOD) * PERIOD - missed * PERIOD);
  // as if the last run had been before the stored slot (the first start may have run one just now)
  await db().pool.query(
    `UPDATE agenda_jobs SET next_run_at = $1, locked_at = NULL, last_run_at = NULL, last_finished_at = NULL,
            data = data - 'run' WHERE name = $2`,
    [stored, name],
  );
  return stored;
}

async function restart(name: string, entry: ConfigEntry, withSettings: typeof settings = settings) {
  const skippedEvents: SlotsSkippedEvent[] = [];
  const harness = SchedulerHarness.create(db().pool, [{ name, handler: async () => {} }], withSettings);
  suite.track(harness);
  harness.scheduler.on("slots:skipped", (event) => skippedEvents.push(event));
  await harness.writeRaw(`tasks:\n  - ${JSON.stringify({ enabled: true, cron: CRON, ...entry })}\n`);
  const restartedAt = Date.now();
  await harness.scheduler.start();
  return { harness, skippedEvents, restartedAt };
}

/** The task's records from the stored slot on, oldest slot first. */
async function records(harness: SchedulerHarness, name: string, from: Date): Promise<RunRecord[]> {
  const runs = await harness.scheduler.runs(name, 200);
  return runs
    .filter((run) => run.scheduledAt >= from)
    .sort((a, b) => a.scheduledAt.getTime() - b.scheduledAt.getTime());
}

function catchUpLines(harness: SchedulerHarness, name: string) {
  return harness.logs.lines.filter((line) => line.task === name && String(line.msg).startsWith("catch-up:"));
}

/**
 * The records from `stored` on, once every slot before the first run has its skipped record: the
 * skipped rows and the run's row are written independently, so the test waits for that figure.
 */
function settled(runs: number) {
  return (rows: RunRecord[], stored: Date) => {
    const ran = rows.filter((row) => row.outcome === "succeeded");
    const first = ran[0];
    if (ran.length < runs || !first) return false;
    const before = rows.filter((row) => row.outcome === "skipped" && row.scheduledAt < first.scheduledAt);
    return before.length === (first.scheduledAt.getTime() - stored.getTime()) / PERIOD;
  };
}

/** Every slot from `from` on has exactly one record, no gaps, no duplicates. */
function expectContiguous(slots: RunRecord[], from: Date) {
  slots.forEach((run, index) => {
    expect(run.scheduledAt.getTime()).toBe(from.getTime() + index * PERIOD);
  });
}

it("downtime over 5+ missed slots, runs: none: every missed slot is recorded skipped, none runs", async () => {
  const name = "cu-none";
  const entry = { name, cron: CRON, catchUp: { runs: "none", window: "1h" } };
  const stored = await downtime(name, entry, 5);
  const { harness, skippedEvents } = await restart(name, entry);
  // wait for two ordinary runs after the decision
  const all = await pollUntil("two runs after the catch-up, every slot before them recorded", async () => {
    const rows = await records(harness, name, stored);
    return settled(2)(rows, stored) && rows;
  });
  const skipped = all.filter((row) => row.outcome === "skipped");
  const ran = all.filter((row) => row.outcome === "succeeded");
  expect(skipped.length).toBeGreaterThanOrEqual(5);
  expectContiguous(skipped, stored);
  expect(skipped.every((row) => /catchUp.runs is none/.test(row.detail ?? ""))).toBe(true);
  // the first run is the first slot after the skipped ones (the newest slot when it was on time, or the next one)
  expect(ran[0]?.scheduledAt.getTime()).toBe(stored.getTime() + skipped.length * PERIOD);
  expect(catchUpLines(harness, name)).toHaveLength(1);
  expect(skippedEvents.reduce((sum, event) => sum + event.count, 0)).toBe(skipped.length);
});

it("downtime over 5+ missed slots, runs: latest: the newest missed slot runs once, the older ones are recorded skipped", async () => {
  const name = "cu-latest";
  const entry = { name, cron: CRON, catchUp: { runs: "latest", window: "1h" } };
  const stored = await downtime(name, entry, 5);
  const { harness, skippedEvents, restartedAt } = await restart(name, entry);
  const all = await pollUntil("the catch-up run and one more, every slot before them recorded", async () => {
    const rows = await records(harness, name, stored);
    return settled(2)(rows, stored) && rows;
  });
  const skipped = all.filter((row) => row.outcome === "skipped");
  const [caughtUp] = all.filter((row) => row.outcome === "succeeded");
  expect(skipped.length).toBeGreaterThanOrEqual(5);
  expectContiguous(skipped, stored);
  expect(skipped[0]?.detail).toMatch(/only the newest missed slot runs/);
  // the newest missed slot: right after the skipped ones, and at or before the start of its run
  expect(caughtUp?.scheduledAt.getTime()).toBe(stored.getTime() + skipped.length * PERIOD);
  expect(caughtUp?.scheduledAt.getTime()).toBeLessThanOrEqual(caughtUp?.startedAt?.getTime() ?? 0);
  expect(caughtUp?.scheduledAt.getTime()).toBeGreaterThan(restartedAt - 2 * PERIOD - 1_000);
  expect(catchUpLines(harness, name)).toHaveLength(1);
  expect(skippedEvents).toEqual([
    expect.objectContaining({ taskName: name, count: skipped.length, runs: caughtUp?.scheduledAt }),
  ]);
});

it("downtime over 8 missed slots, runs: all with a 5 s window: the slots in the window run oldest first, older ones are skipped", async () => {
  const name = "cu-all";
  const entry = { name, cron: CRON, catchUp: { runs: "all", window: "5s" } };
  const stored = await downtime(name, entry, 8);
  const { harness } = await restart(name, entry);
  const all = await pollUntil("four runs, every slot before them recorded", async () => {
    const rows = await records(harness, name, stored);
    return settled(4)(rows, stored) && rows;
  });
  const skipped = all.filter((row) => row.outcome === "skipped");
  const ran = all.filter((row) => row.outcome === "succeeded");
  expect(skipped.length).toBeGreaterThanOrEqual(1);
  expectContiguous(skipped, stored);
  expect(skipped[0]?.detail).toMatch(/older than the catch-up window \(5s\)/);
  // after the skipped ones, every slot runs, one after the other: none is lost
  expectContiguous(ran.slice(0, 4), new Date(stored.getTime() + skipped.length * PERIOD));
  // the first catch-up run was within the window when it started; the last skipped slot was not
  const first = ran[0];
  expect((first?.startedAt?.getTime() ?? 0) - (first?.scheduledAt.getTime() ?? 0)).toBeLessThanOrEqual(
    5_000 + 1_000,
  );
  expect((first?.startedAt?.getTime() ?? 0) - (skipped.at(-1)?.scheduledAt.getTime() ?? 0)).toBeGreaterThan(
    5_000,
  );
  // never two at once, oldest first
  for (let i = 1; i < 4; i++)
    expect(ran[i]?.startedAt?.getTime() ?? 0).toBeGreaterThanOrEqual(ran[i - 1]?.finishedAt.getTime() ?? 0);
  expect(catchUpLines(harness, name)).toHaveLength(1);
});

it("re-enable after several slots follows catchUp (default: latest within 1h), not the frozen next_run_at", async () => {
  const name = "cu-reenable";
  // a daily task whose slot was two hours ago, disabled for a week
  const now = new Date();
  const slotHour = (now.getUTCHours() + 22) % 24;
  const cron = `${now.getUTCMinutes()} ${slotHour} * * *`;
  const harness = await suite.start(
    [{ name, handler: async () => {} }],
    [{ name, cron, enabled: false }],
    settings,
  );
  const newest = new Date(now);
  newest.setUTCSeconds(0, 0);
  newest.setUTCHours(slotHour);
  if (newest > now) newest.setUTCDate(newest.getUTCDate() - 1);
  const frozen = new Date(newest.getTime() - 7 * 86_400_000);
  await db().pool.query("UPDATE agenda_jobs SET next_run_at = $1 WHERE name = $2", [frozen, name]);
  const started: Date[] = [];
  harness.scheduler.on("run:started", (event) => {
    if (event.taskName === name) started.push(event.scheduledAt);
  });
  await harness.writeConfig([{ name, cron, enabled: true }]);
  const rows = await pollUntil("the eight skipped days", async () => {
    const found = await records(harness, name, frozen);
    return found.length >= 8 && found;
  });
  expect(rows.map((row) => row.outcome)).toEqual(Array(8).fill("skipped"));
  expect(rows.map((row) => row.scheduledAt.getTime())).toEqual(
    Array.from({ length: 8 }, (_, day) => frozen.getTime() + day * 86_400_000),
  );
  expect(rows.at(-1)?.detail).toMatch(/older than the catch-up window \(1h\)/);
  const { rows: job } = await db().pool.query<{ next_run_at: Date }>(
    "SELECT next_run_at FROM agenda_jobs WHERE name = $1",
    [name],
  );
  expect(job[0]?.next_run_at.getTime()).toBe(newest.getTime() + 86_400_000);
  expect(started).toEqual([]);
});

it("a stop shorter than the grace: the stored slot runs late, every past slot after it has a skipped record, and the timeline shows no missed slot", async () => {
  const name = "cu-short-stop";
  const entry = { name, cron: CRON }; // the default catch-up policy
  const grace = { missedSlotGraceMs: 30_000 };
  const handler = { name, handler: async () => {} };
  // reads the records and the timeline, not started (a 1 s grace: a slot without a record would
  // show as missed at once)
  const reader = suite.track(SchedulerHarness.create(db().pool, [], { missedSlotGraceMs: 1_000 }));
  const first = await suite.start([handler], [entry], grace);
  await pollUntil(
    "two runs before the stop",
    async () =>
      (await reader.scheduler.runs(name, 20)).filter((run) => run.outcome === "succeeded").length >= 2,
  );
  await first.stop();
  const lastBefore = Math.max(
    ...(await reader.scheduler.runs(name, 20)).map((run) => run.scheduledAt.getTime()),
  );
  // stopped for at least 3 slots after its last run, as the database's clock tells
  const stopSlots = 3;
  await pollUntil(
    `${stopSlots} slots of the database's clock after the last run`,
    async () => {
      const { rows } = await db().pool.query<{ past: boolean }>("SELECT now() > $1::timestamptz AS past", [
        new Date(lastBefore + (stopSlots + 0.5) * PERIOD),
      ]);
      return rows[0]?.past === true;
    },
    { timeoutMs: 30_000, intervalMs: 100 },
  );
  const { harness } = await restart(name, entry, grace);
  // every slot from the last run before the stop to the second run after it has its record (the
  // skipped rows and the run's row are written independently: waited for by the records)
  const after = await pollUntil("two runs after the restart, every slot before them recorded", async () => {
    const rows = await records(harness, name, new Date(lastBefore + PERIOD));
    const ran = rows.filter((row) => row.outcome === "succeeded");
    const second = ran[1]?.scheduledAt.getTime();
    if (second === undefined) return false;
    const slots = new Set(rows.map((row) => row.scheduledAt.getTime()));
    for (let slot = lastBefore + PERIOD; slot <= second; slot += PERIOD) if (!slots.has(slot)) return false;
    return rows.filter((row) => row.scheduledAt.getTime() <= second);
  });
  // one record per slot, contiguous: none missing, none twice
  expectContiguous(after, new Date(lastBefore + PERIOD));
  const [stored, ...rest] = after;
  // the stored slot runs, late (it is within the grace); the past slots after it are recorded skipped
  expect(stored).toMatchObject({ outcome: "succeeded", scheduledAt: new Date(lastBefore + PERIOD) });
  expect((stored?.startedAt?.getTime() ?? 0) - (stored?.scheduledAt.getTime() ?? 0)).toBeGreaterThan(
    stopSlots * PERIOD - PERIOD,
  );
  const skipped = rest.filter((row) => row.outcome === "skipped");
  expect(skipped.length).toBeGreaterThanOrEqual(stopSlots - 1);
  expect(rest.slice(0, skipped.length)).toEqual(skipped); // the skipped ones come right after it
  for (const row of skipped)
    expect(row.detail).toMatch(/missed while nothing ran.*within the missed-slot grace/);
  expect(catchUpLines(harness, name)).toHaveLength(1);
  // the timeline reads the same records: nothing in the stop is `missed`
  const page = await reader.scheduler.timeline({
    from: new Date(lastBefore + 1),
    to: new Date((after.at(-1)?.scheduledAt.getTime() ?? 0) + 1),
    tasks: [name],
    limit: 100,
  });
  const marks = page.marks.flatMap((mark) => (mark.kind === "run" ? [mark] : []));
  expect(marks.filter((mark) => mark.outcome === "missed")).toEqual([]);
  expect(marks.filter((mark) => mark.outcome === "skipped").map((mark) => mark.slot)).toEqual(
    skipped.map((row) => row.scheduledAt),
  );
});

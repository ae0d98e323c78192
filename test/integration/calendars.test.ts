import { expect, it } from "vitest";
import YAML from "yaml";
import { createAdminServer, createMetrics, type RunRecord } from "../../src/index.js";
import { harnessSuite, pollUntil } from "../helpers/harness.js";

/**
 * Calendars against a real PostgreSQL (docs/calendars.md): a slot that a task's calendar excludes
 * is recorded skipped with the calendar's name, its handler is not called, and the next slot runs.
 */

const suite = harnessSuite();
const DAY_MS = 86_400_000;

/** A UTC wall time as a range bound: "2026-12-07T17:30:04". */
const wallUtc = (time: number) => new Date(time).toISOString().slice(0, 19);

it("an excluded slot is recorded skipped with the calendar's name while the next slot runs", async () => {
  const handled: number[] = [];
  const harness = await suite.start(
    [
      { name: "cal", handler: async (ctx) => void handled.push(ctx.scheduledAt.getTime()) },
      { name: "noon", handler: async () => {} },
    ],
    [
      { name: "cal", cron: "*/2 * * * * *", timezone: "UTC" },
      { name: "noon", cron: "0 0 12 * * *", timezone: "UTC" },
    ],
  );
  await pollUntil("a first run of cal", async () =>
    (await harness.scheduler.runs("cal", 5)).some((run) => run.outcome === "succeeded"),
  );

  // a freeze of one 2-second slot far enough ahead for the calendar to be stored before it is claimed
  const excluded = Math.ceil((Date.now() + 20_000) / 2_000) * 2_000;
  // the noon task's next slot falls on a holiday: its upcoming slots start the day after
  const nextNoon = Math.ceil((Date.now() + 1) / DAY_MS) * DAY_MS - DAY_MS / 2;
  const firstNoon = nextNoon > Date.now() ? nextNoon : nextNoon + DAY_MS;
  const holiday = new Date(firstNoon).toISOString().slice(0, 10);
  await harness.writeRaw(
    YAML.stringify({
      calendars: {
        freeze: { ranges: [{ from: wallUtc(excluded), to: wallUtc(excluded + 1_000) }] },
        holidays: { dates: [holiday] },
      },
      tasks: [
        { name: "cal", enabled: true, cron: "*/2 * * * * *", timezone: "UTC", exclude: "freeze" },
        { name: "noon", enabled: true, cron: "0 0 12 * * *", timezone: "UTC", exclude: ["holidays"] },
      ],
    }),
  );
  const stored = await pollUntil("the calendars stored in the job rows", async () => {
    const tasks = await harness.scheduler.status();
    return tasks.every((task) => task.job?.exclude?.length === 1) && tasks;
  });
  expect(stored.map((task) => [task.name, task.job?.exclude, task.configured?.exclude])).toEqual([
    ["cal", ["freeze"], ["freeze"]],
    ["noon", ["holidays"], ["holidays"]],
  ]);
  expect(Date.now()).toBeLessThan(excluded - 2_000); // else the slot may have been claimed before

  const after = excluded + 2_000;
  const runs = await pollUntil(
    "the excluded slot decided and the next one succeeded",
    async () => {
      const list = await harness.scheduler.runs("cal", 50);
      const bySlot = (slot: number) => list.find((run: RunRecord) => run.scheduledAt.getTime() === slot);
      return (
        bySlot(excluded) && bySlot(after)?.outcome === "succeeded" && { skipped: bySlot(excluded), list }
      );
    },
    { timeoutMs: 60_000 },
  );
  expect(runs.skipped).toMatchObject({
    outcome: "skipped",
    detail: 'excluded by calendar "freeze"',
    trigger: "schedule",
  });
  expect(handled).not.toContain(excluded);
  expect(handled).toContain(after);
  // one record for the slot: it was not run as well
  expect(runs.list.filter((run) => run.scheduledAt.getTime() === excluded)).toHaveLength(1);

  const page = await harness.scheduler.timeline({
    from: new Date(excluded - 10_000),
    to: new Date(after + 1_000),
    tasks: ["cal", "noon"],
    limit: 1_000,
  });
  const mark = page.marks.find((each) => each.task === "cal" && each.slot.getTime() === excluded);
  expect(mark).toMatchObject({ outcome: "skipped", reason: 'excluded by calendar "freeze"' });
  // the timeline's upcoming slots of the noon task leave out the holiday
  expect(page.upcoming.noon?.map((time) => time.getTime())).toEqual([
    firstNoon + DAY_MS,
    firstNoon + 2 * DAY_MS,
    firstNoon + 3 * DAY_MS,
  ]);

  // the API's next runs leave it out too (and the dashboard's "Next runs", which shows them)
  const metrics = createMetrics(harness.scheduler);
  const admin = createAdminServer({
    scheduler: harness.scheduler,
    metrics,
    port: 0,
    logger: harness.logs.logger,
  });
  try {
    const { url } = await admin.listen();
    const response = await fetch(`${url}/tasks/noon`);
    const body = (await response.json()) as { nextRuns: string[]; job: { exclude: string[] } };
    expect(body.job.exclude).toEqual(["holidays"]);
    expect(body.nextRuns.slice(0, 3).map((time) => Date.parse(time))).toEqual([
      firstNoon + DAY_MS,
      firstNoon + 2 * DAY_MS,
      firstNoon + 3 * DAY_MS,
    ]);
  } finally {
    await admin.close();
    metrics.stop();
  }
});

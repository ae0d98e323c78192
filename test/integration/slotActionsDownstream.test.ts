import { describe, expect, it } from "vitest";
import YAML from "yaml";
import type { TaskContext } from "../../src/index.js";
import { harnessSuite, pollUntil } from "../helpers/harness.js";

/**
 * A re-run and a backfill with their downstreams (docs/operations.md, docs/dependencies.md): the
 * downstream runs for the upstream's own slot when asked, and not otherwise. In one process
 * against a real PostgreSQL; every figure asserted is read from the database's record.
 */

const suite = harnessSuite();
const db = () => suite.db();
const HOUR = 3_600_000;

async function waits(task: string): Promise<{ slot: Date; state: string }[]> {
  const result = await db().pool.query<{ slot: Date; state: string }>(
    "SELECT slot, state FROM cronwarden_dependency_waits WHERE task = $1 ORDER BY slot",
    [task],
  );
  return result.rows;
}

describe("re-run and backfill with downstream", () => {
  it("a re-run's downstream follows its slot when asked; a backfill's follows each slot only with withDownstream", async () => {
    const contexts: Pick<TaskContext, "taskName" | "scheduledAt" | "trigger" | "upstreams">[] = [];
    const remember = (context: TaskContext) =>
      contexts.push({
        taskName: context.taskName,
        scheduledAt: context.scheduledAt,
        trigger: context.trigger,
        upstreams: context.upstreams,
      });
    const harness = await suite.start(
      [
        {
          name: "ds-up",
          handler: async (context) => {
            remember(context);
            if (context.trigger === "manual") throw new Error("the manual run is broken");
          },
        },
        { name: "ds-down", handler: async (context) => void remember(context) },
      ],
      [
        { name: "ds-up", cron: "0 0 * * * *" },
        { name: "ds-down", after: ["ds-up"] },
      ],
    );
    const actions = harness.scheduler.slotActions;
    const caller = { requestedBy: "ops", via: "test" };

    // a failed slot of the upstream, re-run with its downstream
    expect((await harness.scheduler.runNow("ds-up")).status).toBe("queued");
    const failed = await pollUntil("the failed run", async () =>
      (await harness.scheduler.runHistory({ task: "ds-up", limit: 5 })).runs.find(
        (run) => run.outcome === "failed",
      ),
    );
    await pollUntil("its end saved", async () => !(await harness.scheduler.taskStatus("ds-up"))?.running);
    const slot = failed.scheduledAt;
    const rerun = await actions.rerun("ds-up", slot, { ...caller, withDownstream: true });
    expect(rerun).toMatchObject({ status: "queued", runKey: `ds-up@${slot.toISOString()}` });
    const down = await pollUntil("the downstream's run for the re-run slot", () =>
      contexts.find((context) => context.taskName === "ds-down"),
    );
    expect(down.scheduledAt.toISOString()).toBe(slot.toISOString());
    expect(down.upstreams.map((run) => run.runKey)).toEqual([`ds-up@${slot.toISOString()}`]);

    // a backfill of three hours of the past with its downstream: one downstream run per slot
    const base = Math.floor(Date.now() / HOUR) * HOUR;
    const slots = [base - 30 * HOUR, base - 29 * HOUR, base - 28 * HOUR];
    const created = await actions.createBackfill(
      {
        task: "ds-up",
        from: new Date(slots[0] as number),
        to: new Date(slots[2] as number),
        concurrency: 3,
        withDownstream: true,
        requestedBy: "ops",
      },
      caller,
    );
    expect(created.status).toBe("created");
    await pollUntil("a downstream run per backfilled slot", () => {
      const ran = contexts.filter(
        (context) => context.taskName === "ds-down" && slots.includes(context.scheduledAt.getTime()),
      );
      return ran.length === 3 ? ran : undefined;
    });
    expect(
      contexts
        .filter((context) => context.taskName === "ds-up" && context.trigger === "backfill")
        .map((context) => context.scheduledAt.getTime())
        .sort(),
    ).toEqual(slots);

    // without withDownstream: the downstream has no wait for those slots once the backfill is done
    const quiet = [base - 20 * HOUR, base - 19 * HOUR];
    const plain = await actions.createBackfill(
      {
        task: "ds-up",
        from: new Date(quiet[0] as number),
        to: new Date(quiet[1] as number),
        requestedBy: "ops",
      },
      caller,
    );
    if (plain.status !== "created") throw new Error(`not created: ${plain.status}`);
    await pollUntil(
      "the plain backfill done",
      async () => (await actions.backfill(plain.backfill.id))?.state === "done",
    );
    await pollUntil("both backfilled runs recorded", async () => {
      const runs = await harness.scheduler.runHistory({ task: "ds-up", limit: 50, trigger: "backfill" });
      return runs.runs.filter((run) => quiet.includes(run.scheduledAt.getTime())).length === 2;
    });
    expect((await waits("ds-down")).filter((wait) => quiet.includes(wait.slot.getTime()))).toEqual([]);
    expect(
      contexts.filter(
        (context) => context.taskName === "ds-down" && quiet.includes(context.scheduledAt.getTime()),
      ),
    ).toEqual([]);
  });

  it("re-run with downstream of a scheduled slot whose downstream was skipped: the downstream runs for it now", async () => {
    const ran: Pick<TaskContext, "taskName" | "scheduledAt" | "trigger">[] = [];
    const harness = await suite.start(
      [
        {
          name: "ds2-up",
          handler: async (context) => {
            ran.push({
              taskName: context.taskName,
              scheduledAt: context.scheduledAt,
              trigger: context.trigger,
            });
            if (context.trigger === "schedule") throw new Error("the scheduled run is broken");
          },
        },
        {
          name: "ds2-down",
          handler: async (context) =>
            void ran.push({
              taskName: context.taskName,
              scheduledAt: context.scheduledAt,
              trigger: context.trigger,
            }),
        },
      ],
      [
        { name: "ds2-up", cron: "*/2 * * * * *" },
        { name: "ds2-down", after: ["ds2-up"] },
      ],
    );
    const skipped = await pollUntil("the downstream skipped for a failed slot", async () =>
      (await waits("ds2-down")).find((wait) => wait.state === "skipped"),
    );
    await harness.writeConfig([
      { name: "ds2-up", cron: "0 0 0 1 1 *" },
      { name: "ds2-down", after: ["ds2-up"] },
    ]);
    await pollUntil("the job row of ds2-up unlocked", async () => {
      const job = await db().pool.query("SELECT locked_at FROM agenda_jobs WHERE name = 'ds2-up'");
      return job.rows[0]?.locked_at === null;
    });
    const answer = await harness.scheduler.slotActions.rerun("ds2-up", skipped.slot, {
      requestedBy: "ops",
      via: "test",
      withDownstream: true,
    });
    expect(answer).toMatchObject({ status: "queued" });
    const down = await pollUntil("the downstream's run for the slot", () =>
      ran.find(
        (context) =>
          context.taskName === "ds2-down" && context.scheduledAt.getTime() === skipped.slot.getTime(),
      ),
    );
    expect(down).toBeDefined();
    await pollUntil("the wait ran", async () =>
      (await waits("ds2-down")).some(
        (wait) => wait.slot.getTime() === skipped.slot.getTime() && wait.state === "ran",
      ),
    );
  });
});

describe("backfill and calendars", () => {
  it("a backfill does not run the slots the task's calendars exclude: they are planned skipped with the calendar's name", async () => {
    const harness = await suite.start(
      [{ name: "cal-bf", handler: async () => {} }],
      [{ name: "cal-bf", cron: "0 0 * * * *" }],
    );
    const day = Math.floor(Date.now() / 86_400_000) * 86_400_000 - 10 * 86_400_000;
    const holiday = new Date(day).toISOString().slice(0, 10);
    await harness.writeRaw(
      YAML.stringify({
        calendars: { holidays: { dates: [holiday] } },
        tasks: [
          { name: "cal-bf", enabled: true, cron: "0 0 * * * *", timezone: "UTC", exclude: ["holidays"] },
        ],
      }),
    );
    await pollUntil(
      "the calendar stored",
      async () => (await harness.scheduler.taskStatus("cal-bf"))?.job?.exclude?.length === 1,
    );
    const plan = await harness.scheduler.slotActions.planBackfill({
      task: "cal-bf",
      from: new Date(day - 12 * HOUR),
      to: new Date(day + 36 * HOUR),
      requestedBy: "ops",
    });
    if (plan.status !== "planned") throw new Error(`not planned: ${plan.status}`);
    expect(plan.slots).toHaveLength(49);
    const skipped = plan.slots.filter((slot) => slot.state === "skipped");
    expect(skipped.map((slot) => slot.slot.getTime())).toEqual(
      Array.from({ length: 24 }, (_, hour) => day + hour * HOUR),
    );
    expect(new Set(skipped.map((slot) => slot.detail))).toEqual(new Set(['excluded by calendar "holidays"']));
  });
});

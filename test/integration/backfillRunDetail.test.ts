import { expect, it } from "vitest";
import { harnessSuite, pollUntil } from "../helpers/harness.js";

/**
 * The run detail of a backfill's runs (docs/operations.md, "Backfill"; src/status/runHistory.ts)
 * against a real PostgreSQL: runs of one task's backfill go side by side, each on its slot row, so
 * a start is running while its slot row is held for it, whatever the task's job row says, and it is
 * not ended by the next row its instance wrote for the task (another slot's).
 */

const suite = harnessSuite();
const MINUTE = 60_000;

it("a backfill slot still running shows running in its run detail, then its record; a start whose slot row was taken shows interrupted", async () => {
  let release = () => {};
  const gate = new Promise<void>((resolve) => {
    release = resolve;
  });
  const started: string[] = [];
  const harness = await suite.start(
    [
      {
        name: "bf-detail",
        handler: async (context) => {
          started.push(context.scheduledAt.toISOString());
          // the first slot ends at once: its record is the instance's next row of the task
          if (context.scheduledAt.getTime() !== first) await gate;
        },
      },
    ],
    [{ name: "bf-detail", cron: "0 * * * * *" }],
  );
  const first = Math.floor(Date.now() / MINUTE) * MINUTE - 10 * MINUTE;
  const created = await harness.scheduler.slotActions.createBackfill(
    {
      task: "bf-detail",
      from: new Date(first),
      to: new Date(first + 3 * MINUTE),
      concurrency: 4,
      requestedBy: "ops",
    },
    { requestedBy: "ops", via: "test" },
  );
  if (created.status !== "created") throw new Error(`backfill not created: ${JSON.stringify(created)}`);
  await pollUntil("4 backfill handlers started", async () => started.length === 4);

  type Start = { id: string; slot: string };
  const starts = async () =>
    (
      await suite.db().pool.query<Start>(
        `SELECT id, meta->>'scheduledAt' AS slot FROM (
           SELECT id, meta FROM cronwarden_run_starts WHERE job_name = 'bf-detail' AND meta->>'trigger' = 'backfill'
           UNION ALL SELECT id, meta FROM agenda_logs
            WHERE job_name = 'bf-detail' AND event = 'start' AND meta->>'trigger' = 'backfill') s
          ORDER BY slot`,
      )
    ).rows;
  // the first slot's record, written while the three others run
  await pollUntil("the first slot's record", async () =>
    (await harness.scheduler.runs("bf-detail", 10)).some((run) => run.scheduledAt.getTime() === first),
  );
  const open = await pollUntil("3 starts without a record", async () => {
    const rows = await starts();
    return rows.length === 3 ? rows : undefined;
  });
  expect(open.map((row) => Date.parse(row.slot))).toEqual([
    first + MINUTE,
    first + 2 * MINUTE,
    first + 3 * MINUTE,
  ]);
  for (const start of open) {
    const detail = await harness.scheduler.runDetail(start.id);
    expect(detail, start.slot).toMatchObject({
      outcome: "running",
      trigger: "backfill",
      recordId: null,
      reason: "running now: its log lines are kept when the attempt ends",
    });
  }

  release();
  await pollUntil(
    "the backfill done",
    async () => (await harness.scheduler.slotActions.backfill(created.backfill.id))?.state === "done",
  );
  for (const start of open) {
    const detail = await harness.scheduler.runDetail(start.id);
    expect(detail, start.slot).toMatchObject({ outcome: "succeeded", trigger: "backfill" });
  }

  // a start of the last slot by an instance that died, its slot row since run by another: cut off
  const dead = await suite.db().pool.query<{ id: string }>(
    `INSERT INTO agenda_logs (id, timestamp, level, event, job_id, job_name, message, agenda_name, meta)
     SELECT gen_random_uuid(), $1, 'info', 'start', job_id, job_name, 'job started', 'gone-instance',
            jsonb_build_object('scheduledAt', meta->>'scheduledAt', 'trigger', 'backfill', 'instanceId', 'gone-instance')
       FROM agenda_logs WHERE job_name = 'bf-detail' AND meta->>'scheduledAt' = $2 AND event = 'success'
        AND meta->>'trigger' = 'backfill'
     RETURNING id`,
    [new Date(first + 3 * MINUTE + 1_000), new Date(first + 3 * MINUTE).toISOString()],
  );
  const deadId = dead.rows[0]?.id as string;
  expect(await harness.scheduler.runDetail(deadId)).toMatchObject({
    outcome: "interrupted",
    reason: "never finished (its instance stopped or lost the lock)",
  });
});

import { expect, it } from "vitest";
import type { RunStartedEvent } from "../../src/index.js";
import { harnessSuite, pollUntil } from "../helpers/harness.js";

/**
 * A takeover of a run that died after recording its slot's outcome but before saving its end in
 * the job row (a SIGKILL between the two, or an outage longer than the final save's retries).
 * Nothing is re-run for the dead run's slot; the slot after it, which the dead run's start save
 * had made the row's next run, is still owed and runs.
 */

const suite = harnessSuite();

it("a taken-over run whose slot was already finished is not re-run, and the slot it owed still runs", async () => {
  const started: RunStartedEvent[] = [];
  const harness = await suite.start(
    [{ name: "owed", handler: async () => {} }],
    [{ name: "owed", cron: "0 0 1 1 *" }], // yearly: no slot of its own during the test
    { lockLifetimeMs: 1000 },
  );
  harness.scheduler.on("run:started", (event) => started.push(event));
  // the dead run: slot `finished` started and succeeded (its outcome row), its end never saved; its
  // start save had moved the row's next run to `owed`, now past; its lock long expired
  const { finished, owed } = await deadRunFinished("owed", "now() - interval '60 seconds'");

  // bounded by the row: it is run and its end saved for the owed slot
  await pollUntil(
    "the owed slot's run",
    async () => {
      const { rows: logRows } = await suite
        .db()
        .pool.query(
          `SELECT 1 FROM agenda_logs WHERE job_name = 'owed' AND event = 'success' AND meta->>'scheduledAt' = $1`,
          [owed.toISOString()],
        );
      return logRows.length > 0;
    },
    { timeoutMs: 20_000, intervalMs: 200 },
  );
  expect(harness.logs.messages()).toContainEqual(
    expect.stringContaining("not re-run: the run that died had already recorded the outcome of its slot"),
  );
  expect(started.map((run) => run.scheduledAt.toISOString())).toEqual([owed.toISOString()]);
  expect(started[0]?.rerun).toBe(false);
  const { rows: outcomes } = await suite
    .db()
    .pool.query(
      `SELECT meta->>'scheduledAt' AS slot FROM agenda_logs WHERE job_name = 'owed' AND event IN ('success', 'fail') ORDER BY meta->>'scheduledAt'`,
    );
  expect(outcomes.map((row) => row.slot)).toEqual([finished.toISOString(), owed.toISOString()]);
}, 40_000);

it("the same when the dead instance's locks are released by the liveness check (due now): the slot it owed still runs, not one at the release's time", async () => {
  const started: RunStartedEvent[] = [];
  const harness = await suite.start(
    [{ name: "owed-released", handler: async () => {} }],
    [{ name: "owed-released", cron: "0 0 1 1 *" }],
    { lockLifetimeMs: 1000, livenessCheckMs: 300 },
  );
  harness.scheduler.on("run:started", (event) => started.push(event));
  // as above, but its lock is not expired: only the liveness check, which finds the registered
  // instance "dead" without its liveness lock, releases it (and makes the row due now)
  const { owed } = await deadRunFinished("owed-released", "now() + interval '1 hour'");
  await suite.db().pool.query("INSERT INTO cronwarden_instances (instance_id) VALUES ('dead')");

  await pollUntil(
    "the owed slot's run",
    async () => {
      const { rows: logRows } = await suite
        .db()
        .pool.query(
          `SELECT 1 FROM agenda_logs WHERE job_name = 'owed-released' AND event = 'success' AND meta->>'scheduledAt' = $1`,
          [owed.toISOString()],
        );
      return logRows.length > 0;
    },
    { timeoutMs: 20_000, intervalMs: 200 },
  );
  expect(started.map((run) => run.scheduledAt.toISOString())).toEqual([owed.toISOString()]);
}, 40_000);

it("an earlier outcome of the same slot, recorded before the dead run started, does not stop its re-run", async () => {
  // a pre-locked attempt of the slot was skipped for a re-timing whose new schedule has the same
  // slot; the slot was then run again and that run died: the skip is not that run's outcome
  const started: RunStartedEvent[] = [];
  const harness = await suite.start(
    [{ name: "reskipped", handler: async () => {} }],
    [{ name: "reskipped", cron: "0 0 1 1 *" }],
    { lockLifetimeMs: 1000 },
  );
  harness.scheduler.on("run:started", (event) => started.push(event));
  const { rows } = await suite.db().pool.query<{ slot: Date }>(
    `UPDATE agenda_jobs
        SET next_run_at = now() + interval '1 hour',
            last_run_at = now() - interval '20 seconds', last_finished_at = now() - interval '30 seconds',
            locked_at = now() - interval '60 seconds', last_modified_by = 'dead',
            data = coalesce(data, '{}'::jsonb) || jsonb_build_object('run', jsonb_build_object(
              'slot', to_char((date_trunc('second', now()) - interval '21 seconds') AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
              'startedAt', now() - interval '20 seconds', 'instanceId', 'dead'))
      WHERE name = 'reskipped'
      RETURNING date_trunc('second', now()) - interval '21 seconds' AS slot`,
  );
  const { slot } = rows[0] as { slot: Date };
  await suite.db().pool.query(
    `INSERT INTO agenda_logs (timestamp, level, event, job_name, message, meta)
     VALUES (now() - interval '20.5 seconds', 'info', 'success', 'reskipped', 'job skipped',
             jsonb_build_object('scheduledAt', $1::text, 'outcome', 'skipped', 'instanceId', 'dead'))`,
    [slot.toISOString()],
  );
  await pollUntil("the re-run of the dead run's slot", () => started.find((run) => run.rerun), {
    timeoutMs: 20_000,
  });
  expect(started.map((run) => [run.scheduledAt.toISOString(), run.rerun])).toEqual([
    [slot.toISOString(), true],
  ]);
}, 40_000);

/**
 * A dead run of `task`: its slot 20 s ago started and succeeded (its outcome row), its end never
 * saved; its start save had moved the row's next run to `owed`, 2 s ago; its lock time `lockedAt` (SQL).
 */
async function deadRunFinished(task: string, lockedAt: string): Promise<{ finished: Date; owed: Date }> {
  const { rows } = await suite.db().pool.query<{ finished: Date; owed: Date }>(
    `UPDATE agenda_jobs
        SET next_run_at = date_trunc('second', now()) - interval '2 seconds',
            last_run_at = now() - interval '20 seconds', last_finished_at = now() - interval '30 seconds',
            locked_at = ${lockedAt}, last_modified_by = 'dead',
            data = coalesce(data, '{}'::jsonb) || jsonb_build_object('run', jsonb_build_object(
              'slot', to_char((date_trunc('second', now()) - interval '20 seconds') AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
              'startedAt', now() - interval '20 seconds', 'instanceId', 'dead'))
      WHERE name = $1
      RETURNING date_trunc('second', now()) - interval '20 seconds' AS finished, next_run_at AS owed`,
    [task],
  );
  const { finished, owed } = rows[0] as { finished: Date; owed: Date };
  await suite.db().pool.query(
    `INSERT INTO agenda_logs (timestamp, level, event, job_name, message, meta)
     VALUES (now() - interval '19 seconds', 'info', 'success', $2, 'job completed',
             jsonb_build_object('scheduledAt', $1::text, 'outcome', 'succeeded', 'instanceId', 'dead'))`,
    [finished.toISOString(), task],
  );
  return { finished, owed };
}

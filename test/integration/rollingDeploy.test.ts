import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, expect, it } from "vitest";
import { createTestDatabase, type TestDatabase } from "../helpers/database.js";
import { yamlOf } from "../helpers/harness.js";
import { pollUntil } from "../helpers/poll.js";
import { ServiceProcess } from "../helpers/processes.js";
import { STARTS } from "../helpers/runStarts.js";

/**
 * A rolling deploy: three instances, restarted one after another with SIGTERM while runs are in
 * flight and slots keep coming due, at the default overlap policy (skip). Judged by the run
 * record: no slot ran twice, the runs cut off at a drain deadline were recorded interrupted and
 * re-run for their slot, and no slot was lost or recorded skipped by the overlap rule: a re-run
 * that takes its slot late is not "the previous run still going" for the slot after it, which
 * runs (docs/behaviour.md, "Overlap"). Handlers are shorter than their interval, and the fleet
 * has room for them.
 */

const TASKS = 12;
const CRON = "*/3 * * * * *";
const SLOT_MS = 3000;
/** Shorter than the interval, but a re-run that starts after the cut-off ends after the next slot. */
const RUN_MS = 2500;
/** A takeover by lock expiry would take this long: hand-off and liveness must not wait for it. */
const LOCK_LIFETIME_MS = 30_000;

let db: TestDatabase;
let dir: string;
const processes: ServiceProcess[] = [];

beforeAll(async () => {
  db = await createTestDatabase();
  dir = await mkdtemp(path.join(tmpdir(), "cronwarden-rolling-"));
});

afterAll(async () => {
  await Promise.all(processes.map((child) => child.kill()));
  await db?.drop();
  await rm(dir, { recursive: true, force: true });
});

const names = Array.from({ length: TASKS }, (_, index) => `herd-${String(index).padStart(3, "0")}`);

async function instance(configFile: string, id: string): Promise<ServiceProcess> {
  const child = new ServiceProcess("test/fixtures/instance.ts", {
    DATABASE_URL: db.url,
    CRONWARDEN_CONFIG_FILE: configFile,
    CRONWARDEN_INSTANCE_ID: id,
    CRONWARDEN_MIN_INTERVAL_MS: "1000",
    CRONWARDEN_PROCESS_EVERY_MS: "500",
    CRONWARDEN_LOCK_LIFETIME_MS: String(LOCK_LIFETIME_MS),
    CRONWARDEN_DRAIN_TIMEOUT_MS: "500",
    HERD_TASKS: String(TASKS),
    HERD_TASK_MS: String(RUN_MS),
  });
  processes.push(child);
  await child.waitFor("the start", (line) => /^scheduler started/.test(String(line.msg)));
  return child;
}

interface OutcomeRow {
  task: string;
  slot: string;
  outcome: string;
  rerun: boolean;
  instance: string;
  finished: Date;
  detail: string | null;
}

interface StartRow {
  task: string;
  slot: string;
  started: Date;
}

it("three instances restarted one after another with SIGTERM: every slot succeeds exactly once, interrupted runs are re-run for their slot", async () => {
  const configFile = path.join(dir, "tasks.yaml");
  await writeFile(
    configFile,
    yamlOf([
      // the default overlap (skip): a slot that falls due during a late re-run is not its policy's
      ...names.map((name) => ({ name, cron: CRON })),
      { name: "quick", enabled: false },
      { name: "slow", enabled: false },
    ]),
  );
  let fleet = await Promise.all(["r1", "r2", "r3"].map((id) => instance(configFile, id)));
  const { rows: began } = await db.pool.query<{ now: Date }>("SELECT now()");
  const windowFrom = (began[0] as { now: Date }).now.getTime() + SLOT_MS;

  fleet = await restartOneByOne(fleet, configFile);

  // slots keep coming for a while after the last restart; the window ends before the final stop
  const { rows: ended } = await db.pool.query<{ now: Date }>("SELECT now()");
  const windowUntil = (ended[0] as { now: Date }).now.getTime() + 2 * SLOT_MS;
  await pollUntil(
    "every task's run of a slot after the window",
    async () => {
      const { rows } = await db.pool.query<{ runs: number }>(
        `SELECT count(DISTINCT job_name)::int AS runs FROM agenda_logs
          WHERE event = 'success' AND job_name LIKE 'herd-%' AND (meta->>'scheduledAt')::timestamptz > $1`,
        [new Date(windowUntil)],
      );
      return (rows[0]?.runs ?? 0) >= TASKS;
    },
    { timeoutMs: 30_000, intervalMs: 250 },
  );
  for (const member of fleet) member.child.kill("SIGTERM");
  for (const member of fleet) expect(await member.exited).toEqual({ code: 0, signal: null });

  const { rows: outcomes } = await db.pool.query<OutcomeRow>(
    `SELECT job_name AS task, meta->>'scheduledAt' AS slot, meta->>'outcome' AS outcome,
            coalesce((meta->>'rerun')::boolean, false) AS rerun, agenda_name AS instance,
            timestamp AS finished, meta->>'detail' AS detail
       FROM agenda_logs WHERE job_name LIKE 'herd-%' AND event IN ('success', 'fail')`,
  );
  const { rows: starts } = await db.pool.query<StartRow>(
    `SELECT job_name AS task, meta->>'scheduledAt' AS slot, timestamp AS started
       FROM ${STARTS} WHERE job_name LIKE 'herd-%'`,
  );
  const succeeded = new Map<string, OutcomeRow[]>();
  for (const row of outcomes.filter((row) => row.outcome === "succeeded")) {
    const key = `${row.task}@${row.slot}`;
    succeeded.set(key, [...(succeeded.get(key) ?? []), row]);
  }

  // no slot succeeded twice
  expect([...succeeded.entries()].filter(([, rows]) => rows.length > 1).map(([key]) => key)).toEqual([]);
  // nothing failed: a cut-off run is interrupted, not failed
  expect(outcomes.filter((row) => row.outcome === "failed")).toEqual([]);
  // every interrupted run's slot was re-run to success, as a re-run
  const { interrupted, rerunDelays } = reruns(outcomes, starts, succeeded, windowUntil);
  // at least the first restart caught a run (every instance was an original then)
  expect(interrupted.length).toBeGreaterThanOrEqual(1);
  // handed off, not taken over once the lock expired
  expect(Math.max(...rerunDelays)).toBeLessThan(LOCK_LIFETIME_MS / 2);
  process.stdout.write(
    `rolling deploy: ${interrupted.length} interrupted, re-run after ${rerunDelays.map((ms) => `${ms} ms`).join(", ")}\n`,
  );
  // every slot in the window ran; none was lost (no run, no record) or skipped by the overlap rule
  const { lost, skippedByOverlap, skippedOtherwise } = notRun(outcomes, windowFrom, windowUntil);
  process.stdout.write(`rolling deploy: ${skippedOtherwise.length} slot(s) skipped by catch-up\n`);
  expect(lost).toEqual([]);
  expect(skippedByOverlap).toEqual([]);
}, 180_000);

/** The slots of the window that did not succeed: with no record (lost), or recorded skipped, and why. */
function notRun(outcomes: OutcomeRow[], windowFrom: number, windowUntil: number) {
  const succeeded = new Set(
    outcomes.filter((row) => row.outcome === "succeeded").map((row) => `${row.task}@${row.slot}`),
  );
  const skipped = new Map(
    outcomes.filter((row) => row.outcome === "skipped").map((row) => [`${row.task}@${row.slot}`, row.detail]),
  );
  const lost: string[] = [];
  const skippedByOverlap: string[] = [];
  const skippedOtherwise: string[] = [];
  for (const task of names) {
    for (let slot = Math.ceil(windowFrom / SLOT_MS) * SLOT_MS; slot <= windowUntil; slot += SLOT_MS) {
      const key = `${task}@${new Date(slot).toISOString()}`;
      if (succeeded.has(key)) continue;
      const detail = skipped.get(key);
      if (detail === undefined) lost.push(key);
      else if (/fell due while/.test(detail ?? "")) skippedByOverlap.push(`${key}: ${detail}`);
      else skippedOtherwise.push(`${key}: ${detail}`);
    }
  }
  return { lost, skippedByOverlap, skippedOtherwise };
}

/**
 * The interrupted runs of the window (the final stop of the whole fleet cuts off runs that no one
 * is left to re-run), each checked re-run to success as a re-run, and the time from each cut-off to
 * its slot's last start.
 */
function reruns(
  outcomes: OutcomeRow[],
  starts: StartRow[],
  succeeded: Map<string, OutcomeRow[]>,
  windowUntil: number,
) {
  const interrupted = outcomes.filter(
    (row) => row.outcome === "interrupted" && Date.parse(row.slot) <= windowUntil,
  );
  const rerunDelays: number[] = [];
  for (const row of interrupted) {
    const rerun = succeeded.get(`${row.task}@${row.slot}`)?.[0];
    expect(rerun, `${row.task}@${row.slot} interrupted on ${row.instance}`).toMatchObject({ rerun: true });
    const restart = starts
      .filter((start) => start.task === row.task && start.slot === row.slot)
      .map((start) => start.started.getTime())
      .sort((a, b) => a - b)
      .at(-1) as number;
    rerunDelays.push(restart - row.finished.getTime());
  }
  return { interrupted, rerunDelays };
}

/**
 * Each original instance in turn: SIGTERM in the middle of a run (the drain deadline, 500 ms, cuts
 * the run off), then a replacement. Which instance gets runs depends on the phase of its polls:
 * whichever has one. Returns the new fleet.
 */
async function restartOneByOne(start: ServiceProcess[], configFile: string): Promise<ServiceProcess[]> {
  let fleet = start;
  const ids = new Map(fleet.map((member, index) => [member, `r${index + 1}`]));
  const originals = [...fleet];
  for (let round = 0; round < originals.length; round++) {
    const from = Date.now();
    const remaining = originals.filter((member) => fleet.includes(member));
    const started = (member: ServiceProcess) =>
      member.find((line) => Number(line.time) >= from && /^run started/.test(String(line.msg)));
    const old = await pollUntil(
      "a run in progress on an instance not restarted yet",
      () => remaining.find(started),
      {
        timeoutMs: 15_000,
        intervalMs: 25,
      },
    ).catch(() => remaining[0] as ServiceProcess); // all runs went to the restarted ones this time
    await new Promise((resolve) => setTimeout(resolve, 200));
    old.child.kill("SIGTERM");
    expect(await old.exited).toEqual({ code: 0, signal: null });
    const replacement = await instance(configFile, `${ids.get(old)}b`);
    fleet = fleet.map((member) => (member === old ? replacement : member));
  }

  return fleet;
}

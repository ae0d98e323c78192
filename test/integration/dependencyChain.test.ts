import { writeFile } from "node:fs/promises";
import path from "node:path";
import { expect, it } from "vitest";
import { yamlOf } from "../helpers/harness.js";
import { pollUntil } from "../helpers/poll.js";
import { ServiceProcess } from "../helpers/processes.js";
import { processSuite } from "../helpers/processSuite.js";

/**
 * A chain A -> B -> C across three OS processes (docs/dependencies.md), judged by the database's
 * record: every task ran exactly once per slot, each after its upstream finished, and a downstream
 * run whose instance is SIGKILLed is re-run for its slot before its own downstream runs.
 */

const suite = processSuite("chain");
const CRON = "*/2 * * * * *";
const SLOTS = 20;

async function instance(configFile: string, id: string, environment: NodeJS.ProcessEnv = {}) {
  const child = new ServiceProcess("test/fixtures/chainInstance.ts", {
    DATABASE_URL: suite.db.url,
    CRONWARDEN_CONFIG_FILE: configFile,
    CRONWARDEN_INSTANCE_ID: id,
    CRONWARDEN_MIN_INTERVAL_MS: "1000",
    CRONWARDEN_PROCESS_EVERY_MS: "500",
    // a takeover by lock expiry would take this long: liveness must not wait for it
    CRONWARDEN_LOCK_LIFETIME_MS: "30000",
    ...environment,
  });
  suite.processes.push(child);
  await child.waitFor("the start", (line) => /^scheduler started/.test(String(line.msg)));
  return child;
}

async function writeChain(): Promise<string> {
  const configFile = path.join(suite.dir, "tasks.yaml");
  await writeFile(
    configFile,
    yamlOf([
      { name: "chain-a", cron: CRON },
      { name: "chain-b", after: ["chain-a"] },
      { name: "chain-c", after: ["chain-b"] },
    ]),
  );
  return configFile;
}

/** The suite drops the job and log tables after each test; the waits of the last test go too. */
async function clearWaits(): Promise<void> {
  await suite.db.pool.query(
    "DO $$ BEGIN IF to_regclass('cronwarden_dependency_waits') IS NOT NULL THEN TRUNCATE cronwarden_dependency_waits; END IF; END $$",
  );
}

interface RunRow {
  task: string;
  slot: string;
  event: string;
  outcome: string | null;
  rerun: boolean;
  instance: string | null;
  started: Date | null;
  finished: Date;
}

async function runRows(): Promise<RunRow[]> {
  const { rows } = await suite.db.pool.query<RunRow>(
    `SELECT job_name AS task, meta->>'scheduledAt' AS slot, event, meta->>'outcome' AS outcome,
            coalesce((meta->>'rerun')::boolean, false) AS rerun, coalesce(meta->>'instanceId', agenda_name) AS instance,
            (meta->>'startedAt')::timestamptz AS started, timestamp AS finished
       FROM agenda_logs WHERE job_name LIKE 'chain-%' AND event IN ('start', 'success', 'fail')
     UNION ALL -- the runs in progress (src/engine/sql/runStarts.ts)
     SELECT job_name, meta->>'scheduledAt', 'start', NULL, coalesce((meta->>'rerun')::boolean, false),
            coalesce(meta->>'instanceId', agenda_name), timestamp, timestamp
       FROM cronwarden_run_starts WHERE job_name LIKE 'chain-%'
      ORDER BY finished`,
  );
  return rows;
}

it(`three instances, a chain A -> B -> C on a 2 s cron, ${SLOTS} slots: each task ran once per slot, in order`, async () => {
  const configFile = await writeChain();
  await Promise.all(["d1", "d2", "d3"].map((id) => instance(configFile, id)));
  const slotsOfC = async () =>
    new Set(
      (await runRows())
        .filter((row) => row.task === "chain-c" && row.event !== "start")
        .map((row) => row.slot),
    );
  await pollUntil(`${SLOTS} slots of chain-c`, async () => (await slotsOfC()).size >= SLOTS || undefined, {
    timeoutMs: (SLOTS + 15) * 2000,
    intervalMs: 250,
  });
  const rows = await runRows();
  const outcomes = rows.filter((row) => row.event !== "start");
  const slots = [...(await slotsOfC())].sort().slice(0, SLOTS);
  for (const slot of slots) {
    const of = (task: string) => outcomes.filter((row) => row.task === task && row.slot === slot);
    const [a, b, c] = [of("chain-a"), of("chain-b"), of("chain-c")];
    // exactly once per slot, and each succeeded
    expect([a.length, b.length, c.length], `runs of slot ${slot}`).toEqual([1, 1, 1]);
    for (const run of [...a, ...b, ...c]) expect(run.outcome).toBe("succeeded");
    // in order: each started after its upstream's run of the slot had ended
    const [runA, runB, runC] = [a[0], b[0], c[0]] as [RunRow, RunRow, RunRow];
    expect(runB.started?.getTime()).toBeGreaterThanOrEqual(runA.finished.getTime());
    expect(runC.started?.getTime()).toBeGreaterThanOrEqual(runB.finished.getTime());
  }
  // nothing dropped: every slot A ran in the window was run by B and C too (in a loaded machine A
  // itself may skip a slot by the catch-up rule; its downstreams never skip one of its runs)
  const window = outcomes.filter(
    (row) =>
      row.task === "chain-a" && row.slot >= (slots[0] as string) && row.slot <= (slots.at(-1) as string),
  );
  expect(window.map((row) => row.slot).sort()).toEqual(slots);
  // the claims: one decided wait per downstream and slot
  const { rows: waits } = await suite.db.pool.query<{ task: string; n: number }>(
    `SELECT task, count(*)::int AS n FROM cronwarden_dependency_waits
      WHERE slot = ANY($1::timestamptz[]) AND state = 'ran' GROUP BY task ORDER BY task`,
    [slots],
  );
  expect(waits).toEqual([
    { task: "chain-b", n: SLOTS },
    { task: "chain-c", n: SLOTS },
  ]);
}, 120_000);

it("an instance SIGKILLed while B runs: B is re-run for the same slot, and C waits for that re-run", async () => {
  await clearWaits();
  const configFile = await writeChain();
  const ids = ["k1", "k2", "k3"];
  const fleet = await Promise.all(ids.map((id) => instance(configFile, id, { CHAIN_B_MS: "3000" })));
  // B running, per the record: a start row without an outcome of its slot yet
  const running = await pollUntil(
    "a run of chain-b in progress",
    async () => {
      const rows = await runRows();
      return rows.find(
        (row) =>
          row.task === "chain-b" &&
          row.event === "start" &&
          !rows.some(
            (other) => other.task === "chain-b" && other.event !== "start" && other.slot === row.slot,
          ),
      );
    },
    { timeoutMs: 30_000, intervalMs: 50 },
  );
  const victim = fleet[ids.indexOf(String(running.instance))];
  if (!victim) throw new Error(`no process for instance ${running.instance}`);
  await victim.kill("SIGKILL");
  const slot = running.slot;
  const settled = await pollUntil(
    "chain-c's run of the killed slot",
    async () => {
      const rows = await runRows();
      return rows.some((row) => row.task === "chain-c" && row.slot === slot && row.event !== "start")
        ? rows
        : undefined;
    },
    { timeoutMs: 40_000, intervalMs: 250 },
  );
  const b = settled.filter((row) => row.task === "chain-b" && row.slot === slot && row.event !== "start");
  const c = settled.filter((row) => row.task === "chain-c" && row.slot === slot && row.event !== "start");
  expect(b).toHaveLength(1);
  expect(b[0]).toMatchObject({ outcome: "succeeded", rerun: true });
  expect(b[0]?.instance).not.toBe(running.instance);
  expect(c).toHaveLength(1);
  expect(c[0]?.outcome).toBe("succeeded");
  // C waited for the re-run: it started after the re-run's end
  expect(c[0]?.started?.getTime()).toBeGreaterThanOrEqual(b[0]?.finished.getTime() as number);
  const { rows: context } = await suite.db.pool.query(
    `SELECT meta->'upstreams' AS upstreams FROM agenda_logs
      WHERE job_name = 'chain-c' AND event = 'success' AND meta->>'scheduledAt' = $1`,
    [slot],
  );
  expect(context[0]?.upstreams).toEqual([
    { name: "chain-b", runKey: `chain-b@${slot}`, outcome: "succeeded" },
  ]);
}, 90_000);

it("an instance stopped (SIGTERM) while B runs past its drain: B is handed off and re-run for the slot, C waits for it", async () => {
  await clearWaits();
  const configFile = await writeChain();
  const ids = ["h1", "h2", "h3"];
  const fleet = await Promise.all(
    // B runs long enough that it is still going when its start row is seen on a loaded machine
    ids.map((id) => instance(configFile, id, { CHAIN_B_MS: "8000", CRONWARDEN_DRAIN_TIMEOUT_MS: "500" })),
  );
  const running = await pollUntil(
    "a run of chain-b in progress",
    async () => {
      const rows = await runRows();
      return rows.find(
        (row) =>
          row.task === "chain-b" &&
          row.event === "start" &&
          !rows.some(
            (other) => other.task === "chain-b" && other.event !== "start" && other.slot === row.slot,
          ),
      );
    },
    { timeoutMs: 30_000, intervalMs: 50 },
  );
  const victim = fleet[ids.indexOf(String(running.instance))];
  if (!victim) throw new Error(`no process for instance ${running.instance}`);
  victim.child.kill("SIGTERM");
  expect(await victim.exited).toEqual({ code: 0, signal: null });
  const slot = running.slot;
  const settled = await pollUntil(
    "chain-c's run of the handed-off slot",
    async () => {
      const rows = await runRows();
      return rows.some((row) => row.task === "chain-c" && row.slot === slot && row.event !== "start")
        ? rows
        : undefined;
    },
    { timeoutMs: 40_000, intervalMs: 250 },
  );
  const b = settled.filter((row) => row.task === "chain-b" && row.slot === slot && row.event !== "start");
  expect(b.map((row) => [row.outcome, row.instance === running.instance])).toEqual([
    ["interrupted", true],
    ["succeeded", false],
  ]);
  expect(b[1]?.rerun).toBe(true);
  const c = settled.filter((row) => row.task === "chain-c" && row.slot === slot && row.event !== "start");
  expect(c).toHaveLength(1);
  expect(c[0]?.started?.getTime()).toBeGreaterThanOrEqual(b[1]?.finished.getTime() as number);
}, 90_000);

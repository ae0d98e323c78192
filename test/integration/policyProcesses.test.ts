import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, afterEach, beforeAll, expect, it } from "vitest";
import { createTestDatabase, type TestDatabase } from "../helpers/database.js";
import { pollUntil, yamlOf } from "../helpers/harness.js";
import { ServiceProcess } from "../helpers/processes.js";
import { emptyJobTables } from "../helpers/processSuite.js";

/** Policies where instances matter, as real OS processes against one PostgreSQL (docs/behaviour.md). */

let db: TestDatabase;
let dir: string;
const processes: ServiceProcess[] = [];

beforeAll(async () => {
  db = await createTestDatabase();
  dir = await mkdtemp(path.join(tmpdir(), "cronwarden-policies-"));
});

afterEach(async () => {
  await Promise.all(processes.splice(0).map((child) => child.kill()));
  await emptyJobTables(db.pool);
});

afterAll(async () => {
  await db?.drop();
  await rm(dir, { recursive: true, force: true });
});

async function instance(name: string, config: Parameters<typeof yamlOf>[0]) {
  const configFile = path.join(dir, `${name}.yaml`);
  await writeFile(configFile, yamlOf(config));
  const child = new ServiceProcess("test/fixtures/instance.ts", {
    DATABASE_URL: db.url,
    CRONWARDEN_CONFIG_FILE: configFile,
    CRONWARDEN_INSTANCE_ID: name,
    CRONWARDEN_MIN_INTERVAL_MS: "1000",
    CRONWARDEN_PROCESS_EVERY_MS: "500",
  });
  processes.push(child);
  return child;
}

const started = (line: { msg?: unknown }) => /^scheduler started/.test(String(line.msg));

async function outcomes(task: string): Promise<Array<{ outcome: string; slot: string; instance: string }>> {
  const { rows } = await db.pool.query<{ outcome: string; slot: string; instance: string }>(
    `SELECT meta->>'outcome' AS outcome, meta->>'scheduledAt' AS slot, coalesce(meta->>'instanceId', agenda_name) AS instance
       FROM agenda_logs WHERE job_name = $1 AND event IN ('success', 'fail') ORDER BY meta->>'scheduledAt'`,
    [task],
  );
  return rows;
}

it("an at: one-shot runs exactly once across three instances, then shows no next run", async () => {
  // armed a day ahead while the three processes start (a busy machine can take many seconds),
  // then re-armed a few seconds ahead once all three run
  const names = ["p1", "p2", "p3"];
  const dayAhead = new Date(Math.ceil(Date.now() / 1000) * 1000 + 86_400_000).toISOString();
  const peers = await Promise.all(names.map((name) => instance(name, [{ name: "quick", at: dayAhead }])));
  await Promise.all(peers.map((peer) => peer.waitFor(`${peer.child.pid} to start`, started)));
  const at = new Date(Math.ceil(Date.now() / 1000) * 1000 + 4_000).toISOString();
  await Promise.all(
    names.map((name) => writeFile(path.join(dir, `${name}.yaml`), yamlOf([{ name: "quick", at }]))),
  );
  const runs = await pollUntil(
    "the one-shot's run",
    async () => {
      const found = await outcomes("quick");
      return found.length > 0 && found;
    },
    { timeoutMs: 45_000 },
  );
  // its end saved: no next run, so no instance can lock it again (the lock needs a due next run)
  await pollUntil("the one-shot's end saved", async () => {
    const { rows } = await db.pool.query(
      "SELECT next_run_at, last_finished_at, locked_at FROM agenda_jobs WHERE name = 'quick'",
    );
    return rows[0]?.last_finished_at !== null && rows[0]?.locked_at === null && rows[0];
  });
  const { rows } = await db.pool.query("SELECT next_run_at FROM agenda_jobs WHERE name = 'quick'");
  expect(rows[0]?.next_run_at).toBeNull();
  expect(await outcomes("quick")).toEqual(runs);
  expect(runs).toEqual([{ outcome: "succeeded", slot: at, instance: expect.any(String) }]);
}, 120_000);

it("downtime: every instance stopped over 5+ missed slots, one started: catchUp none records each one skipped and runs none", async () => {
  const config = [{ name: "quick", cron: "*/2 * * * * *", catchUp: { runs: "none", window: "1h" } }];
  const first = await Promise.all(["d1", "d2"].map((name) => instance(name, config)));
  await Promise.all(first.map((peer) => peer.waitFor(`${peer.child.pid} to start`, started)));
  // stopped, not killed: a run cut off by a kill would be re-run for its own slot at the restart
  await Promise.all(first.map((peer) => peer.kill("SIGTERM")));
  processes.splice(0);
  // as if they had been down for 80 s: more than the grace (60 s by default), 40 slots
  const stored = new Date(Math.floor(Date.now() / 2_000) * 2_000 - 80_000);
  // the row as 80 s of downtime leave it: its last run, of the slot before, finished; nothing since
  // (a run cut off by the stop would be re-run for its own slot, whatever the catch-up policy)
  await db.pool.query(
    `UPDATE agenda_jobs SET next_run_at = $1, locked_at = NULL,
            last_run_at = $1::timestamptz - interval '2 seconds',
            last_finished_at = $1::timestamptz - interval '1900 milliseconds'
      WHERE name = 'quick'`,
    [stored],
  );
  const restarted = await instance("d3", config);
  await restarted.waitFor("the restart", started);
  const after = await pollUntil("a run after the restart", async () => {
    // the restarted instance's records: the stopped ones may have run the last slots before `stored`
    // was set back over them
    const fresh = (await outcomes("quick")).filter(
      (row) => new Date(row.slot) >= stored && row.instance === "d3",
    );
    const first = fresh.find((row) => row.outcome === "succeeded");
    if (!first) return false;
    // the skipped rows and the run's row are written independently: wait for all of them
    const before = fresh.filter((row) => row.outcome === "skipped" && row.slot < first.slot);
    return before.length === (new Date(first.slot).getTime() - stored.getTime()) / 2_000 && fresh;
  });
  const firstRunSlot = after.find((row) => row.outcome === "succeeded")?.slot ?? "";
  // the downtime's slots: the ones before the first run after the restart
  const skipped = after.filter((row) => row.outcome === "skipped" && row.slot < firstRunSlot);
  expect(skipped.length).toBeGreaterThanOrEqual(40);
  skipped.forEach((row, index) => {
    expect(new Date(row.slot).getTime()).toBe(stored.getTime() + index * 2_000);
    expect(row.instance).toBe("d3");
  });
  const firstRun = after.find((row) => row.outcome === "succeeded");
  expect(new Date(firstRun?.slot ?? 0).getTime()).toBe(stored.getTime() + skipped.length * 2_000);
  expect(restarted.lines.filter((line) => String(line.msg).startsWith("catch-up:"))).toHaveLength(1);
});

import { writeFile } from "node:fs/promises";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { type ConfigEntry, yamlOf } from "../helpers/harness.js";
import { pollUntil } from "../helpers/poll.js";
import type { ServiceProcess } from "../helpers/processes.js";
import { fixtureInstance, processSuite } from "../helpers/processSuite.js";
import { STARTS } from "../helpers/runStarts.js";

/** Several service processes against one PostgreSQL: exactly once per slot, and takeover after a crash. */

const suite = processSuite("failover");

const LOCK_LIFETIME_MS = 2000;
const PROCESS_EVERY_MS = 500;

async function cluster(names: string[], config: ConfigEntry[], environment: NodeJS.ProcessEnv = {}) {
  const configFile = path.join(suite.dir, `${names.join("-")}.yaml`);
  await writeFile(configFile, yamlOf(config));
  const peers = names.map((name) =>
    fixtureInstance(suite, name, configFile, {
      CRONWARDEN_PROCESS_EVERY_MS: String(PROCESS_EVERY_MS),
      CRONWARDEN_LOCK_LIFETIME_MS: String(LOCK_LIFETIME_MS),
      ...environment,
    }),
  );
  suite.processes.push(...peers);
  await Promise.all(
    peers.map((peer) => peer.waitFor("the start", (line) => /^scheduler started/.test(String(line.msg)))),
  );
  return peers;
}

interface RunRow {
  event: string;
  instance: string;
  slot: string;
  started: Date;
  finished: Date;
  rerun: boolean;
}

async function finishedRuns(task: string): Promise<RunRow[]> {
  const { rows } = await suite.db.pool.query<RunRow>(
    `SELECT event, agenda_name AS instance, meta->>'scheduledAt' AS slot, (meta->>'startedAt')::timestamptz AS started,
            (meta->>'finishedAt')::timestamptz AS finished, coalesce((meta->>'rerun')::boolean, false) AS rerun
       FROM agenda_logs WHERE job_name = $1 AND event IN ('success', 'fail') ORDER BY started`,
    [task],
  );
  return rows;
}

describe("several instances", () => {
  it("three instances, a 2 s cron, 20 slots: every slot ran exactly once and none was skipped", async () => {
    await cluster(
      ["p1", "p2", "p3"],
      [
        { name: "quick", cron: "*/2 * * * * *" },
        { name: "slow", enabled: false },
      ],
    );
    const runs = await pollUntil(
      "20 finished slots",
      async () => {
        const rows = await finishedRuns("quick");
        return rows.length >= 21 ? rows : undefined;
      },
      { timeoutMs: 70_000, intervalMs: 500 },
    );
    const slots = runs.map((run) => run.slot);
    expect(new Set(slots).size).toBe(slots.length); // no slot ran twice
    const times = [...new Set(slots)].map((slot) => Date.parse(slot)).sort((a, b) => a - b);
    const gaps = times.slice(1).map((time, index) => time - (times[index] as number));
    expect(gaps.filter((gap) => gap !== 2000)).toEqual([]); // and none was skipped
    expect(runs.every((run) => run.event === "success")).toBe(true);
  }, 90_000);

  it("a herd larger than one instance's share: no instance holds more than its half, both share it, each task runs once", async () => {
    // 4 workers per instance and handlers of 300 ms: the 40 jobs would all be prepared before
    // their slot by the first instance to poll, but each claims at most its share of what is due
    // (src/engine/sql/claim.ts): half, counted among the instances registered at the claim. A long
    // lock lifetime, so that no queued lock expires and passes to the other instance that way.
    const names = Array.from({ length: 40 }, (_, index) => `herd-${String(index).padStart(3, "0")}`); // as test/fixtures/instance.ts names them
    await cluster(
      ["h1", "h2"],
      [
        ...names.map((name) => ({ name, cron: "*/15 * * * * *" })),
        { name: "quick", enabled: false },
        { name: "slow", enabled: false },
      ],
      {
        HERD_TASKS: "40",
        HERD_TASK_MS: "300",
        CRONWARDEN_MAX_CONCURRENCY: "4",
        CRONWARDEN_LOCK_LIFETIME_MS: "30000",
      },
    );
    // the first slot whose claims come after both instances registered: its look-ahead at a 500 ms
    // poll and a 30 s lock is 500 ms + twice the 1.5 s start-ahead (src/engine/agendaEngine.ts)
    const lookAheadMs = PROCESS_EVERY_MS + 2 * 1_500;
    const slotMs = Math.ceil((Date.now() + lookAheadMs) / 15_000) * 15_000;
    // how many herd jobs each instance holds locked, sampled from the slot's first claim on
    await new Promise((resolve) => setTimeout(resolve, Math.max(0, slotMs - lookAheadMs - Date.now())));
    let maxHeld = 0;
    let sampling = true;
    const sampler = (async () => {
      while (sampling) {
        const { rows } = await suite.db.pool.query<{ held: number }>(
          `SELECT count(*)::int AS held FROM agenda_jobs
            WHERE name LIKE 'herd-%' AND locked_at IS NOT NULL GROUP BY last_modified_by`,
        );
        for (const row of rows) maxHeld = Math.max(maxHeld, row.held);
        await new Promise((resolve) => setTimeout(resolve, 10));
      }
    })();
    const slot = new Date(slotMs).toISOString();
    await pollUntil(
      `all 40 tasks ran for the slot ${slot}`,
      async () => {
        const { rows } = await suite.db.pool.query<{ runs: number }>(
          `SELECT count(*)::int AS runs FROM agenda_logs
            WHERE event = 'success' AND job_name LIKE 'herd-%' AND meta->>'scheduledAt' = $1`,
          [slot],
        );
        return (rows[0]?.runs ?? 0) >= 40;
      },
      { timeoutMs: 45_000, intervalMs: 250 },
    );
    await new Promise((resolve) => setTimeout(resolve, 1_000)); // a duplicate would show by now
    sampling = false;
    await sampler;
    expect(maxHeld).toBeGreaterThan(0);
    expect(maxHeld).toBeLessThanOrEqual(20);
    const { rows } = await suite.db.pool.query<{ task: string; instance: string }>(
      `SELECT job_name AS task, coalesce(meta->>'instanceId', agenda_name) AS instance
         FROM (SELECT job_name, meta, agenda_name FROM ${STARTS}
               UNION ALL SELECT job_name, meta, agenda_name FROM agenda_logs WHERE event IN ('success', 'fail')) r
        WHERE job_name LIKE 'herd-%' AND meta->>'scheduledAt' = $1`,
      [slot],
    );
    const perTask = new Map<string, number>();
    for (const row of rows) perTask.set(row.task, (perTask.get(row.task) ?? 0) + 1);
    // one start row and one success row per task: every task ran exactly once for the slot
    expect([...perTask.values()].every((count) => count === 2)).toBe(true);
    expect(perTask.size).toBe(40);
    expect(new Set(rows.map((row) => row.instance))).toEqual(new Set(["h1", "h2"]));
  }, 70_000);

  it("a run longer than several lock lifetimes on one instance while two others poll: once, uninterrupted, one owner", async () => {
    await cluster(
      ["l1", "l2", "l3"],
      [
        { name: "slow", cron: "0 0 0 1 1 *" },
        { name: "quick", enabled: false },
      ],
      {
        SLOW_TASK_MS: String(LOCK_LIFETIME_MS * 4),
      },
    );
    await suite.db.pool.query("UPDATE agenda_jobs SET next_run_at = now() WHERE name = 'slow'");
    const runs = await pollUntil(
      "the slow run",
      async () => {
        const rows = await finishedRuns("slow");
        return rows.length >= 1 ? rows : undefined;
      },
      { timeoutMs: 45_000, intervalMs: 250 },
    );
    const [run] = runs;
    expect(run).toMatchObject({ event: "success", rerun: false });
    expect((run?.finished.getTime() ?? 0) - (run?.started.getTime() ?? 0)).toBeGreaterThanOrEqual(
      LOCK_LIFETIME_MS * 4,
    );
    // nobody else started the job while it ran
    const { rows: starts } = await suite.db.pool.query(
      `SELECT agenda_name FROM ${STARTS} WHERE job_name = 'slow'`,
    );
    expect(starts).toEqual([{ agenda_name: run?.instance }]);
  }, 60_000);

  it("SIGKILL of the instance running a long task: another instance re-runs it long before the lock expires (liveness), marked as a re-run", async () => {
    const LONG_LOCK_MS = 30_000; // a takeover by lock expiry would take this long
    const peers = await cluster(
      ["k1", "k2", "k3"],
      [
        { name: "slow", cron: "0 0 0 1 1 *" },
        { name: "quick", enabled: false },
      ],
      {
        SLOW_TASK_MS: "60000",
        CRONWARDEN_LOCK_LIFETIME_MS: String(LONG_LOCK_MS),
      },
    );
    // make the yearly job due now, so one of the three picks it up
    await suite.db.pool.query("UPDATE agenda_jobs SET next_run_at = now() WHERE name = 'slow'");
    const owner = await pollUntil("an instance to start the run", () =>
      peers.find((peer) => peer.find((line) => line.task === "slow" && line.msg === "run started")),
    );
    const slot = owner.find((line) => line.task === "slow" && line.msg === "run started")?.slot;
    await slowStartRowWritten();
    await owner.kill("SIGKILL");
    const killedAt = Date.now();
    const survivors = peers.filter((peer) => peer !== owner);
    const rerun = await pollUntil(
      "a re-run on a survivor",
      () =>
        survivors
          .flatMap((peer) => peer.lines)
          .find((line) => line.task === "slow" && /^run started: a re-run/.test(String(line.msg))),
      { timeoutMs: LONG_LOCK_MS, intervalMs: 50 },
    );
    const takeoverMs = Date.now() - killedAt;
    expect(rerun.slot).toBe(slot); // the same slot, so the handler can be idempotent
    expect(rerun.rerunOf).toMatchObject({
      instanceId: owner === peers[0] ? "k1" : owner === peers[1] ? "k2" : "k3",
    });
    // the lock was renewed until the kill: under half its lifetime, only liveness can have freed it
    // (the exact figure belongs in the benchmark)
    expect(takeoverMs).toBeLessThan(LONG_LOCK_MS / 2);
    // the run record says the same from the start: both start rows name the killed slot, and the
    // re-run's carries the re-run mark (so a second crash is labelled right too)
    const starts = await pollUntil("the re-run's start row", async () => {
      const { rows } = await suite.db.pool.query(
        `SELECT meta->>'scheduledAt' AS slot, coalesce((meta->>'rerun')::boolean, false) AS rerun, agenda_name
           FROM ${STARTS} WHERE job_name = 'slow' ORDER BY timestamp`,
      );
      return rows.length >= 2 ? rows : undefined;
    });
    expect(starts.map((row) => [row.slot, row.rerun])).toEqual([
      [slot, false],
      [slot, true],
    ]);
  }, 60_000);

  it("SIGSTOP of the instance running a long task: its session lingers, so no takeover before the lock expires; continued, it cannot save over its successor and is recorded lock-lost, naming the taker", async () => {
    const LOCK_MS = 6_000;
    const peers = await cluster(
      ["p1", "p2"],
      [
        { name: "slow", cron: "0 0 0 1 1 *" },
        { name: "quick", enabled: false },
      ],
      { SLOW_TASK_MS: "60000", CRONWARDEN_LOCK_LIFETIME_MS: String(LOCK_MS) },
    );
    await suite.db.pool.query("UPDATE agenda_jobs SET next_run_at = now() WHERE name = 'slow'");
    const owner = await pollUntil("an instance to start the run", () =>
      peers.find((peer) => peer.find((line) => line.task === "slow" && line.msg === "run started")),
    );
    const ownerId = owner === peers[0] ? "p1" : "p2";
    const survivor = peers.find((peer) => peer !== owner) as ServiceProcess;
    await slowStartRowWritten();
    owner.child.kill("SIGSTOP");
    // the last lock time the stopped process wrote (a renewal in flight may still land)
    await new Promise((resolve) => setTimeout(resolve, 200));
    const { rows: held } = await suite.db.pool.query<{ locked_at: Date }>(
      "SELECT locked_at FROM agenda_jobs WHERE name = 'slow'",
    );
    const lastLock = held[0]?.locked_at as Date;
    await survivor.waitFor(
      "the takeover after the lock expired",
      (line) => line.task === "slow" && /^run started: a re-run/.test(String(line.msg)),
      LOCK_MS * 4,
    );
    // the re-run's start row is written after its log line: wait for the record
    const starts = await pollUntil("both start rows", async () => {
      const { rows } = await suite.db.pool.query<{ timestamp: Date; agenda_name: string }>(
        `SELECT timestamp, agenda_name FROM ${STARTS} WHERE job_name = 'slow' ORDER BY timestamp`,
      );
      return rows.length >= 2 ? rows : undefined;
    });
    expect(starts.map((row) => row.agenda_name)).toEqual([ownerId, ownerId === "p1" ? "p2" : "p1"]);
    // by the record: the re-run started only once the stopped owner's last lock had expired
    expect(starts[1]?.timestamp.getTime()).toBeGreaterThanOrEqual(lastLock.getTime() + LOCK_MS);
    owner.child.kill("SIGCONT");
    await owner.waitFor(
      "the continued run to notice its lost lock",
      (line) => /^lock lost/.test(String(line.msg)),
      20_000,
    );
    // recorded lock-lost, naming the instance that took the lock: never succeeded or failed
    const taker = ownerId === "p1" ? "p2" : "p1";
    const lostRow = await pollUntil("the continued run's record", async () => {
      const { rows } = await suite.db.pool.query<{ event: string; outcome: string; detail: string }>(
        `SELECT event, meta->>'outcome' AS outcome, meta->>'detail' AS detail FROM agenda_logs
          WHERE job_name = 'slow' AND agenda_name = $1 AND event IN ('success', 'fail')`,
        [ownerId],
      );
      return rows[0];
    });
    expect(lostRow).toMatchObject({ event: "fail", outcome: "lock-lost" });
    expect(lostRow.detail).toContain(`the lock was taken by instance "${taker}"`);
    const { rows: now } = await suite.db.pool.query(
      "SELECT locked_at IS NOT NULL AS locked, last_modified_by FROM agenda_jobs WHERE name = 'slow'",
    );
    expect(now[0]).toEqual({ locked: true, last_modified_by: taker });
  }, 90_000);

  it("SIGTERM with a run past the drain timeout: the run is recorded interrupted, not failed, and another instance re-runs its slot at once", async () => {
    const LONG_LOCK_MS = 30_000; // a takeover by lock expiry would take this long: the hand-off must not wait for it
    const peers = await cluster(
      ["h1", "h2"],
      [
        { name: "slow", cron: "0 0 0 1 1 *" },
        { name: "quick", enabled: false },
      ],
      {
        SLOW_TASK_MS: "60000",
        CRONWARDEN_DRAIN_TIMEOUT_MS: "500",
        CRONWARDEN_LOCK_LIFETIME_MS: String(LONG_LOCK_MS),
      },
    );
    await suite.db.pool.query("UPDATE agenda_jobs SET next_run_at = now() WHERE name = 'slow'");
    const owner = await pollUntil("an instance to start the run", () =>
      peers.find((peer) => peer.find((line) => line.task === "slow" && line.msg === "run started")),
    );
    const slot = owner.find((line) => line.task === "slow" && line.msg === "run started")?.slot;
    const survivor = peers.find((peer) => peer !== owner);
    owner.child.kill("SIGTERM");
    expect(await owner.exited).toEqual({ code: 0, signal: null });
    const stoppedAt = Date.now();
    const rerun = await survivor?.waitFor(
      "the re-run on the other instance",
      (line) => line.task === "slow" && /^run started: a re-run/.test(String(line.msg)),
      LONG_LOCK_MS,
    );
    expect(rerun?.slot).toBe(slot);
    // handed off, not taken over after the lock expired
    expect(Date.now() - stoppedAt).toBeLessThan(LONG_LOCK_MS / 2);
    const outcomes = await pollUntil("the interrupted run's record", async () => {
      const { rows } = await suite.db.pool.query(
        `SELECT meta->>'outcome' AS outcome, meta->>'scheduledAt' AS slot FROM agenda_logs
          WHERE job_name = 'slow' AND event IN ('success', 'fail') ORDER BY timestamp`,
      );
      return rows.length >= 1 ? rows : undefined;
    });
    expect(outcomes[0]).toEqual({ outcome: "interrupted", slot });
    expect(outcomes.filter((row) => row.outcome === "failed")).toEqual([]);
    expect(owner.messages()).toContainEqual(
      expect.stringMatching(
        /1 run\(s\) still going after 500 ms were cut off and handed to the other instances/,
      ),
    );
  }, 90_000);
});

/**
 * The start row of the `slow` task's run is written beside its "run started" log line, not before
 * it: a process killed or stopped between the two would leave no record of that run.
 */
async function slowStartRowWritten(): Promise<void> {
  await pollUntil("the slow run's start row", async () => {
    const { rows } = await suite.db.pool.query(`SELECT 1 FROM ${STARTS} WHERE job_name = 'slow'`);
    return rows.length > 0;
  });
}

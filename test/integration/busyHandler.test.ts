import { writeFile } from "node:fs/promises";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { yamlOf } from "../helpers/harness.js";
import { pollUntil } from "../helpers/poll.js";
import type { ServiceProcess } from "../helpers/processes.js";
import { fixtureInstance, processSuite } from "../helpers/processSuite.js";
import { STARTS } from "../helpers/runStarts.js";

/**
 * Busy is not dead (docs/locks-and-failover.md): a handler that blocks its instance's event loop for
 * twice the lock lifetime keeps its lock (the lock keeper's thread renews it), so no other instance
 * runs its slot as well, and each stall is logged once.
 */

const suite = processSuite("busy");

const LOCK_LIFETIME_MS = 1000;
const BUSY_MS = 2 * LOCK_LIFETIME_MS;
const SLOTS = 20;

interface RecordRow {
  event: string;
  instance: string;
  slot: string;
  outcome: string | null;
  started: Date | null;
  finished: Date | null;
}

describe("a handler that blocks the event loop", () => {
  it(`two instances, ${BUSY_MS} ms of synchronous work per run (2x the lock lifetime), ${SLOTS} slots: one run per slot, never two at once, one stall line per run`, async () => {
    const configFile = path.join(suite.dir, "busy.yaml");
    await writeFile(
      configFile,
      yamlOf([
        { name: "busy", cron: "*/3 * * * * *" },
        { name: "quick", enabled: false },
        { name: "slow", enabled: false },
      ]),
    );
    const peers = ["b1", "b2"].map((name) =>
      fixtureInstance(suite, name, configFile, {
        CRONWARDEN_LOCK_LIFETIME_MS: String(LOCK_LIFETIME_MS),
        CRONWARDEN_STALL_WARN_MS: String(LOCK_LIFETIME_MS),
        BUSY_TASK_MS: String(BUSY_MS),
      }),
    );
    suite.processes.push(...peers);
    await Promise.all(
      peers.map((peer) => peer.waitFor("the start", (line) => /^scheduler started/.test(String(line.msg)))),
    );

    const records = async () =>
      (
        await suite.db.pool.query<RecordRow>(
          `SELECT event, agenda_name AS instance, meta->>'scheduledAt' AS slot, meta->>'outcome' AS outcome,
                  (meta->>'startedAt')::timestamptz AS started, (meta->>'finishedAt')::timestamptz AS finished
             FROM agenda_logs WHERE job_name = 'busy' ORDER BY timestamp, id`,
        )
      ).rows;
    const finished = (rows: RecordRow[]) =>
      rows.filter((row) => row.event === "success" || row.event === "fail");
    await pollUntil(
      `${SLOTS} finished runs of "busy"`,
      async () => finished(await records()).length >= SLOTS,
      {
        timeoutMs: SLOTS * 3_000 + 60_000,
      },
    );
    // stopped (SIGTERM drains: a run going ends and is recorded), the record and the logs are whole
    await Promise.all(peers.map((peer) => peer.kill("SIGTERM")));
    const rows = await records();

    const outcomes = finished(rows);
    // every run succeeded, none lost its lock: one start and one success per slot
    expect(outcomes.map((row) => `${row.event}:${row.outcome}`)).toEqual(
      outcomes.map(() => "success:succeeded"),
    );
    const slots = outcomes.map((row) => row.slot);
    expect(new Set(slots).size).toBe(slots.length);
    const starts = (
      await suite.db.pool.query<{ slot: string }>(
        `SELECT meta->>'scheduledAt' AS slot FROM ${STARTS} WHERE job_name = 'busy'`,
      )
    ).rows;
    expect(new Set(starts.map((row) => row.slot)).size).toBe(starts.length);
    // never two runs at once, by the record: each run ended before the next one started
    const spans = outcomes
      .map((row) => ({ started: row.started?.getTime() ?? 0, finished: row.finished?.getTime() ?? 0 }))
      .sort((a, b) => a.started - b.started);
    for (let index = 1; index < spans.length; index++)
      expect(spans[index]?.started).toBeGreaterThanOrEqual(spans[index - 1]?.finished ?? 0);

    // one stall line per blocked run, on the instance that ran it, once its stall ended
    for (const [index, peer] of peers.entries()) {
      const ran = outcomes.filter((row) => row.instance === `b${index + 1}`).length;
      const stalls = () =>
        peer.lines.filter(
          (line) =>
            /^event loop blocked for/.test(String(line.msg)) &&
            (line.runningTasks as string[] | undefined)?.includes("busy"),
        );
      expect(stalls().length).toBe(ran);
      for (const line of stalls()) expect(line.durationMs).toBeGreaterThanOrEqual(BUSY_MS / 2);
    }
  }, 180_000);

  it("a backfill of a busy task on two instances: each slot's lock is kept by the lock keeper's thread, so each slot runs once and none is taken over", async () => {
    const token = "busy-backfill-operator-0123456789";
    const configFile = path.join(suite.dir, "backfill.yaml");
    await writeFile(
      configFile,
      yamlOf([
        { name: "busy", cron: "0 * * * * *" },
        { name: "quick", enabled: false },
        { name: "slow", enabled: false },
      ]),
    );
    const peers = ["k1", "k2"].map((name) =>
      fixtureInstance(suite, name, configFile, {
        CRONWARDEN_LOCK_LIFETIME_MS: String(LOCK_LIFETIME_MS),
        CRONWARDEN_ADMIN_TOKEN: token,
        CRONWARDEN_STALL_WARN_MS: String(LOCK_LIFETIME_MS),
        BUSY_TASK_MS: String(BUSY_MS),
      }),
    );
    suite.processes.push(...peers);
    const [url] = await Promise.all(
      peers.map(async (peer) => {
        const listening = await peer.waitFor("the admin API", (line) =>
          /^admin API listening/.test(String(line.msg)),
        );
        await peer.waitFor("the start", (line) => /^scheduler started/.test(String(line.msg)));
        return String(listening.url);
      }),
    );
    // 6 past minute slots, two at a time: each blocks its instance's event loop for 2 lock lifetimes
    const from = Math.floor(Date.now() / 60_000) * 60_000 - 20 * 60_000;
    const response = await fetch(`${url}/tasks/busy/backfills`, {
      method: "POST",
      headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
      body: JSON.stringify({
        from: new Date(from).toISOString(),
        to: new Date(from + 5 * 60_000).toISOString(),
        concurrency: 2,
      }),
    });
    expect(response.status).toBe(201);
    const { id } = (await response.json()) as { id: string };
    const slots = async () =>
      (
        await suite.db.pool.query<{ state: string; runs: number }>(
          "SELECT state, runs FROM cronwarden_backfill_slots WHERE backfill_id = $1 ORDER BY slot",
          [id],
        )
      ).rows;
    const done = await pollUntil(
      "the backfill's 6 slots ended",
      async () => {
        const rows = await slots();
        return rows.every((row) => row.state !== "pending" && row.state !== "running") && rows;
      },
      { timeoutMs: 90_000 },
    );
    // claimed once each: no slot's lock expired while its handler held the event loop
    expect(done).toEqual(done.map(() => ({ state: "succeeded", runs: 1 })));
    expect(done).toHaveLength(6);
    const { rows: records } = await suite.db.pool.query<{ slot: string; event: string; outcome: string }>(
      `SELECT meta->>'scheduledAt' AS slot, event, meta->>'outcome' AS outcome FROM agenda_logs
        WHERE job_name = 'busy' AND event IN ('success', 'fail') AND meta->>'trigger' = 'backfill'`,
    );
    expect(records.map((row) => `${row.event}:${row.outcome}`)).toEqual(
      records.map(() => "success:succeeded"),
    );
    expect(new Set(records.map((row) => row.slot)).size).toBe(6);
    expect(records).toHaveLength(6);
    // the handlers did block: a stall line per backfill run, on the instance that ran it
    const stalls = peers.flatMap((peer) =>
      peer.lines.filter((line) => /^event loop blocked for/.test(String(line.msg))),
    );
    expect(stalls.length).toBeGreaterThanOrEqual(6);
    await Promise.all(peers.map((peer) => peer.kill("SIGTERM")));
  }, 150_000);

  it("SIGSTOP of an instance mid-run (a busy handler): the other takes the slot over once the lock expires, and the stopped run, continued, is never recorded succeeded", async () => {
    const configFile = path.join(suite.dir, "stopped.yaml");
    await writeFile(
      configFile,
      yamlOf([
        { name: "busy", cron: "0 0 0 1 1 *" },
        { name: "quick", enabled: false },
        { name: "slow", enabled: false },
      ]),
    );
    const peers = ["s1", "s2"].map((name) =>
      fixtureInstance(suite, name, configFile, {
        CRONWARDEN_LOCK_LIFETIME_MS: String(LOCK_LIFETIME_MS),
        BUSY_TASK_MS: String(4 * LOCK_LIFETIME_MS),
      }),
    );
    suite.processes.push(...peers);
    await Promise.all(
      peers.map((peer) => peer.waitFor("the start", (line) => /^scheduler started/.test(String(line.msg)))),
    );
    await suite.db.pool.query("UPDATE agenda_jobs SET next_run_at = now() WHERE name = 'busy'");
    const ownerId = await pollUntil("an instance to lock the slot", async () => {
      const { rows } = await suite.db.pool.query<{ owner: string | null }>(
        "SELECT last_modified_by AS owner FROM agenda_jobs WHERE name = 'busy' AND locked_at IS NOT NULL",
      );
      return rows[0]?.owner ?? undefined;
    });
    const owner = peers[ownerId === "s1" ? 0 : 1] as ServiceProcess;
    const takerId = ownerId === "s1" ? "s2" : "s1";
    owner.child.kill("SIGSTOP");
    const successes = async () =>
      (
        await suite.db.pool.query<{ instance: string }>(
          "SELECT agenda_name AS instance FROM agenda_logs WHERE job_name = 'busy' AND event = 'success'",
        )
      ).rows;
    await pollUntil("the taker's run to succeed", async () => (await successes()).length > 0, {
      timeoutMs: 60_000,
    });
    owner.child.kill("SIGCONT");
    // drained and stopped, the continued run has written whatever it writes
    await owner.kill("SIGTERM");
    expect((await successes()).map((row) => row.instance)).toEqual([takerId]);
    const { rows: ownRecords } = await suite.db.pool.query<{ event: string; outcome: string | null }>(
      "SELECT event, meta->>'outcome' AS outcome FROM agenda_logs WHERE job_name = 'busy' AND agenda_name = $1 AND event IN ('success', 'fail')",
      [ownerId],
    );
    // its handler had started (then it lost the lock) or not (then it gave nothing back to record)
    for (const record of ownRecords) expect(record).toEqual({ event: "fail", outcome: "lock-lost" });
  }, 120_000);
});

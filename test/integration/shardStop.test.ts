import { writeFile } from "node:fs/promises";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { type ConfigEntry, yamlOf } from "../helpers/harness.js";
import { pollUntil } from "../helpers/poll.js";
import { fixtureInstance, processSuite } from "../helpers/processSuite.js";

/**
 * A graceful stop of an instance in the middle of a sharded slot (docs/sharding.md, "Shutdown"):
 * the shard worker and the engine drain under one drainTimeoutMs, so the stop of the instance
 * that coordinates the slot and runs shards takes about drainTimeoutMs, not twice it (the shard
 * drain first, then the coordinator's); each cut-off shard is given back and run again elsewhere
 * only after the stopping instance let it go, and every shard still succeeds once, by the record.
 */

const suite = processSuite("shard-stop");
const SHARDS = 30;
const SHARD_MS = 8_000;
const DRAIN_MS = 3_000;

async function createTables(): Promise<void> {
  await suite.db.pool.query(`
    CREATE TABLE IF NOT EXISTS shard_calls (task TEXT, slot TIMESTAMPTZ, shard_index INT, instance TEXT, at TIMESTAMPTZ DEFAULT clock_timestamp());
    CREATE TABLE IF NOT EXISTS shard_reduces (task TEXT, slot TIMESTAMPTZ, instance TEXT, results INT, succeeded INT, value_sum BIGINT);
    TRUNCATE shard_calls, shard_reduces;
    DO $$ BEGIN IF to_regclass('cronwarden_shard_slots') IS NOT NULL THEN TRUNCATE cronwarden_shard_slots CASCADE; END IF; END $$`);
}

describe("stopping an instance in the middle of a sharded slot", () => {
  it("takes one drainTimeoutMs, gives its shards back, and every shard still succeeds once", async () => {
    await createTables();
    const configFile = path.join(suite.dir, "shard-stop.yaml");
    const entries = (sharded: ConfigEntry): ConfigEntry[] => [
      sharded,
      { name: "mapped", enabled: false },
      { name: "quick", enabled: false },
      { name: "slow", enabled: false },
    ];
    await writeFile(configFile, yamlOf(entries({ name: "sharded", enabled: false, shards: SHARDS })));
    const names = ["t1", "t2", "t3"];
    const peers = names.map((name) =>
      fixtureInstance(suite, name, configFile, {
        CRONWARDEN_MAX_CONCURRENCY: "5",
        CRONWARDEN_DRAIN_TIMEOUT_MS: String(DRAIN_MS),
        SHARD_TASK_MS: String(SHARD_MS),
      }),
    );
    suite.processes.push(...peers);
    await Promise.all(
      peers.map((peer) => peer.waitFor("the start", (line) => /^scheduler started/.test(String(line.msg)))),
    );
    const at = new Date(Math.ceil((Date.now() + 3_000) / 1000) * 1000);
    await writeFile(configFile, yamlOf(entries({ name: "sharded", at: at.toISOString(), shards: SHARDS })));

    // the coordinating instance, once it runs shards of its own
    const coordinator = await pollUntil(
      "the coordinator running shards",
      async () => {
        const { rows } = await suite.db.pool.query<{ coordinator: string; running: number }>(
          `SELECT sl.coordinator, (SELECT count(*)::int FROM cronwarden_shards s
                                    WHERE s.holder = sl.coordinator AND s.state = 'running') AS running
             FROM cronwarden_shard_slots sl WHERE sl.task_name = 'sharded'`,
        );
        const row = rows[0];
        return row && row.running > 0 ? row.coordinator : undefined;
      },
      { timeoutMs: 60_000, intervalMs: 100 },
    );
    const victim = peers[names.indexOf(coordinator)];
    if (!victim) throw new Error(`no process for ${coordinator}`);
    await victim.kill("SIGTERM");
    expect((await victim.exited).code).toBe(0);

    // the stop's duration, by the instance's own record: from "stopping" to "stopped"
    const stopping = victim.find((line) => /^stopping: no new runs/.test(String(line.msg)));
    const stopped = victim.find((line) => /^stopped/.test(String(line.msg)));
    if (!stopping || !stopped) throw new Error(`no stop lines: ${victim.messages().slice(-10).join("\n")}`);
    const stoppingAt = Number(stopping.time);
    const stopMs = Number(stopped.time) - stoppingAt;
    expect(stopping.drainTimeoutMs).toBe(DRAIN_MS);
    // the shards (8 s) outlast the drain, and so does the coordinator's wait: one deadline for both
    expect(stopMs).toBeGreaterThanOrEqual(DRAIN_MS - 50);
    expect(stopMs).toBeLessThan(DRAIN_MS * 1.5);
    // its coordinator was cut off and handed off, not failed
    expect(stopped.msg).toMatch(/handed off/);

    const ended = await pollUntil(
      "the slot ended on the others",
      async () => {
        const { rows } = await suite.db.pool.query<{
          outcome: string;
          reduce_state: string;
          reduce_runs: number;
          coordinator: string;
        }>(
          "SELECT outcome, reduce_state, reduce_runs, coordinator FROM cronwarden_shard_slots WHERE task_name = 'sharded' AND outcome IS NOT NULL",
        );
        return rows[0];
      },
      { timeoutMs: 90_000, intervalMs: 250 },
    );
    expect(ended).toMatchObject({ outcome: "succeeded", reduce_state: "succeeded", reduce_runs: 1 });
    expect(ended.coordinator).not.toBe(coordinator);

    const { rows: shards } = await suite.db.pool.query<{
      shard_index: number;
      state: string;
      holder: string;
      runs: number;
    }>(
      "SELECT shard_index, state, holder, runs FROM cronwarden_shards WHERE task_name = 'sharded' ORDER BY shard_index",
    );
    expect(shards).toHaveLength(SHARDS);
    expect(shards.filter((shard) => shard.state !== "succeeded")).toEqual([]);
    // the shards the stopped instance had started (its handler calls) and not ended: given back, run
    // once more by another instance, which started only after the stopping instance let them go
    const { rows: calls } = await suite.db.pool.query<{ shard_index: number; instance: string; at: Date }>(
      "SELECT shard_index, instance, at FROM shard_calls WHERE task = 'sharded' ORDER BY at",
    );
    const cutOff = new Set(
      calls.filter((call) => call.instance === coordinator).map((call) => call.shard_index),
    );
    expect(cutOff.size).toBeGreaterThan(0);
    for (const index of cutOff) {
      const shard = shards[index];
      expect(shard?.holder).not.toBe(coordinator);
      expect(shard?.runs).toBe(2);
      const again = calls.filter((call) => call.shard_index === index && call.instance !== coordinator);
      expect(again).toHaveLength(1);
      expect(again[0]?.at.getTime()).toBeGreaterThanOrEqual(stoppingAt + DRAIN_MS - 100);
    }
    // the others' shards ran once each
    for (const shard of shards.filter((s) => !cutOff.has(s.shard_index))) expect(shard.runs).toBe(1);
    const { rows: reduces } = await suite.db.pool.query<{ results: number; succeeded: number }>(
      "SELECT results, succeeded FROM shard_reduces WHERE task = 'sharded'",
    );
    expect(reduces).toEqual([{ results: SHARDS, succeeded: SHARDS }]);
  }, 150_000);
});

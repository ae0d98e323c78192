import { writeFile } from "node:fs/promises";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { runCli } from "../../src/cli/main.js";
import { type ConfigEntry, yamlOf } from "../helpers/harness.js";
import { pollUntil } from "../helpers/poll.js";
import type { ServiceProcess } from "../helpers/processes.js";
import { fixtureInstance, processSuite } from "../helpers/processSuite.js";

/**
 * Sharded tasks on three OS processes against one PostgreSQL (docs/sharding.md): every shard
 * succeeds exactly once by the database's record, the reduce runs once, no instance runs more than
 * 40 % of the shards; and the same when the coordinating instance is SIGKILLed halfway.
 */

const suite = processSuite("sharding");
const SHARDS = 200;
const TOKEN = "sharding-test-token-0123456789";

async function createTables(): Promise<void> {
  await suite.db.pool.query(`
    CREATE TABLE IF NOT EXISTS shard_calls (task TEXT, slot TIMESTAMPTZ, shard_index INT, instance TEXT, at TIMESTAMPTZ DEFAULT clock_timestamp());
    CREATE TABLE IF NOT EXISTS shard_reduces (task TEXT, slot TIMESTAMPTZ, instance TEXT, results INT, succeeded INT, value_sum BIGINT);
    TRUNCATE shard_calls, shard_reduces;
    DO $$ BEGIN IF to_regclass('cronwarden_shard_slots') IS NOT NULL THEN TRUNCATE cronwarden_shard_slots CASCADE; END IF; END $$`);
}

/** Three instances started with the sharded tasks disabled; returns them and a function that schedules one slot of each. */
async function cluster(
  shardMs: number,
): Promise<{ peers: ServiceProcess[]; urls: string[]; schedule: () => Promise<Date> }> {
  await createTables();
  const configFile = path.join(suite.dir, `sharding-${Date.now()}.yaml`);
  const disabled: ConfigEntry[] = [
    { name: "sharded", enabled: false, shards: SHARDS },
    { name: "mapped", enabled: false },
    { name: "quick", enabled: false },
    { name: "slow", enabled: false },
  ];
  await writeFile(configFile, yamlOf(disabled));
  const peers = ["s1", "s2", "s3"].map((name) =>
    fixtureInstance(suite, name, configFile, {
      CRONWARDEN_MAX_CONCURRENCY: "5",
      SHARD_TASK_MS: String(shardMs),
      MAP_ITEMS: "30",
      CRONWARDEN_ADMIN_TOKEN: TOKEN,
    }),
  );
  suite.processes.push(...peers);
  const urls = await Promise.all(
    peers.map(async (peer) => {
      await peer.waitFor("the start", (line) => /^scheduler started/.test(String(line.msg)));
      const listening = await peer.waitFor("the admin API", (line) =>
        /^admin API listening on/.test(String(line.msg)),
      );
      return String(listening.url);
    }),
  );
  const schedule = async () => {
    const at = new Date(Math.ceil((Date.now() + 3_000) / 1000) * 1000);
    await writeFile(
      configFile,
      yamlOf([
        {
          name: "sharded",
          at: at.toISOString(),
          shards: SHARDS,
          shardParameters: Array.from({ length: SHARDS }, (_, i) => `p${i}`),
        },
        { name: "mapped", at: at.toISOString() },
        { name: "quick", enabled: false },
        { name: "slow", enabled: false },
      ]),
    );
    return at;
  };
  return { peers, urls, schedule };
}

interface ShardRecord {
  shard_index: number;
  state: string;
  holder: string;
  result: { index: number; parameter: string } | null;
  runs: number;
}

async function shardRecords(task: string): Promise<ShardRecord[]> {
  const { rows } = await suite.db.pool.query<ShardRecord>(
    "SELECT shard_index, state, holder, result, runs FROM cronwarden_shards WHERE task_name = $1 ORDER BY shard_index",
    [task],
  );
  return rows;
}

/** The slot's run record once the coordinator's run ended (one success row per slot run). */
async function slotEnded(task: string, timeoutMs: number) {
  return pollUntil(
    `${task}'s sharded slot ended`,
    async () => {
      const { rows } = await suite.db.pool.query<{
        outcome: string;
        reduce_state: string;
        reduce_runs: number;
        round: number;
      }>(
        "SELECT outcome, reduce_state, reduce_runs, round FROM cronwarden_shard_slots WHERE task_name = $1 AND outcome IS NOT NULL",
        [task],
      );
      const { rows: runs } = await suite.db.pool.query<{ event: string }>(
        "SELECT event FROM agenda_logs WHERE job_name = $1 AND event IN ('success', 'fail')",
        [task],
      );
      return rows.length > 0 && runs.length > 0 ? { slots: rows, runs } : undefined;
    },
    { timeoutMs, intervalMs: 250 },
  );
}

async function reduces(task: string) {
  const { rows } = await suite.db.pool.query<{
    instance: string;
    results: number;
    succeeded: number;
    value_sum: string;
  }>("SELECT instance, results, succeeded, value_sum FROM shard_reduces WHERE task = $1", [task]);
  return rows;
}

const auth = { authorization: `Bearer ${TOKEN}` };

/** The API, the CLI and the metrics show the slot's shards. */
async function seeingIt(urls: string[], at: Date): Promise<void> {
  const [url] = urls;
  if (!url) throw new Error("no admin URL");
  const response = await fetch(`${url}/tasks/sharded/slots/${at.toISOString()}/shards`, { headers: auth });
  expect(response.status).toBe(200);
  const body = (await response.json()) as {
    shardCount: number;
    outcome: string;
    counts: Record<string, number>;
    reduce: { state: string; runs: number };
    shards: { index: number; state: string; instance: string; durationMs: number }[];
  };
  expect(body).toMatchObject({ shardCount: SHARDS, outcome: "succeeded", counts: { succeeded: SHARDS } });
  expect(body.reduce).toMatchObject({ state: "succeeded", runs: 1 });
  expect(
    body.shards.every((shard) => ["s1", "s2", "s3"].includes(shard.instance) && shard.durationMs >= 100),
  ).toBe(true);
  const missing = await fetch(`${url}/tasks/sharded/slots/2001-01-01T00:00:00.000Z/shards`, {
    headers: auth,
  });
  expect(missing.status).toBe(404);

  // the slots of a range with their shards counted (the dashboard's timeline)
  const range = `from=${new Date(at.getTime() - 60_000).toISOString()}&to=${new Date(at.getTime() + 60_000).toISOString()}`;
  const progress = await fetch(`${url}/sharded-slots?${range}&tasks=sharded`, { headers: auth });
  expect(progress.status).toBe(200);
  expect(((await progress.json()) as { slots: unknown[] }).slots).toEqual([
    expect.objectContaining({
      task: "sharded",
      slot: at.toISOString(),
      round: 1,
      shardCount: SHARDS,
      counts: { queued: 0, running: 0, succeeded: SHARDS, failed: 0, skipped: 0 },
      failed: [],
      reduce: "succeeded",
      outcome: "succeeded",
    }),
  ]);
  const backwards = await fetch(`${url}/sharded-slots?from=${at.toISOString()}&to=2001-01-01T00:00:00Z`, {
    headers: auth,
  });
  expect(backwards.status).toBe(400);

  const out: string[] = [];
  const code = await runCli(["shards", "sharded", "--slot", at.toISOString()], {
    out: (line) => out.push(line),
    err: (line) => out.push(line),
    env: { CRONWARDEN_ADMIN_URL: url, CRONWARDEN_ADMIN_TOKEN: TOKEN },
    cwd: process.cwd(),
  });
  expect(code).toBe(0);
  expect(out[0]).toMatch(
    /^sharded @ .* \(round 1\): 200 shard\(s\): 200 succeeded; reduce succeeded; coordinator s[123]$/,
  );
  expect(out.filter((line) => /^\d+\s+succeeded\s+s[123]\s+1\s+\d+ ms/.test(line))).toHaveLength(SHARDS);

  // each instance counts the shards it ran; together, every shard once
  let total = 0;
  for (const instanceUrl of urls) {
    const text = await (await fetch(`${instanceUrl}/metrics`, { headers: auth })).text();
    const match = /cronwarden_shards_total\{task="sharded",outcome="succeeded"\} (\d+)/.exec(text);
    total += Number(match?.[1] ?? 0);
  }
  expect(total).toBe(SHARDS);
}

const sumOfIndexes = (count: number) => (count * (count - 1)) / 2;

describe("sharded tasks on three instances", () => {
  it("200 static shards and 30 map items: each shard succeeds once, one reduce, no instance over 40 %", async () => {
    const { schedule, urls } = await cluster(100);
    const at = await schedule();
    const ended = await slotEnded("sharded", 60_000);
    expect(ended.slots).toEqual([
      { outcome: "succeeded", reduce_state: "succeeded", reduce_runs: 1, round: 1 },
    ]);
    expect(ended.runs.map((run) => run.event)).toEqual(["success"]);
    const shards = await shardRecords("sharded");
    expect(shards).toHaveLength(SHARDS);
    expect(shards.every((shard) => shard.state === "succeeded" && shard.runs === 1)).toBe(true);
    expect(shards.map((shard) => shard.result?.parameter)).toEqual(
      shards.map((shard) => `p${shard.shard_index}`),
    );
    const byInstance = new Map<string, number>();
    for (const shard of shards) byInstance.set(shard.holder, (byInstance.get(shard.holder) ?? 0) + 1);
    expect([...byInstance.keys()].sort()).toEqual(["s1", "s2", "s3"]);
    expect(Math.max(...byInstance.values())).toBeLessThanOrEqual(SHARDS * 0.4);
    // each handler was called once per shard (no crash here), and the reduce once with every result
    const { rows: calls } = await suite.db.pool.query<{ n: number; distinct_n: number }>(
      "SELECT count(*)::int AS n, count(DISTINCT shard_index)::int AS distinct_n FROM shard_calls WHERE task = 'sharded'",
    );
    expect(calls[0]).toEqual({ n: SHARDS, distinct_n: SHARDS });
    expect(await reduces("sharded")).toEqual([
      expect.objectContaining({
        results: SHARDS,
        succeeded: SHARDS,
        value_sum: String(sumOfIndexes(SHARDS)),
      }),
    ]);

    const mapped = await slotEnded("mapped", 30_000);
    expect(mapped.slots).toEqual([
      { outcome: "succeeded", reduce_state: "succeeded", reduce_runs: 1, round: 1 },
    ]);
    const items = await shardRecords("mapped");
    expect(items.map((shard) => [shard.state, shard.result?.parameter])).toEqual(
      Array.from({ length: 30 }, (_, index) => ["succeeded", `tenant-${index}`]),
    );
    expect(await reduces("mapped")).toEqual([expect.objectContaining({ results: 30, succeeded: 30 })]);
    await seeingIt(urls, at);
  }, 120_000);

  it("the coordinating instance SIGKILLed halfway: its shards re-run, still one success per shard and one reduce", async () => {
    const { peers, schedule } = await cluster(300);
    await schedule();
    // halfway: half the shards recorded succeeded
    const coordinator = await pollUntil(
      "half the shards succeeded",
      async () => {
        const { rows } = await suite.db.pool.query<{ done: number; coordinator: string | null }>(
          `SELECT (SELECT count(*)::int FROM cronwarden_shards WHERE task_name = 'sharded' AND state = 'succeeded') AS done,
                  (SELECT coordinator FROM cronwarden_shard_slots WHERE task_name = 'sharded') AS coordinator`,
        );
        const row = rows[0];
        return row && row.done >= SHARDS / 2 && row.coordinator ? row.coordinator : undefined;
      },
      { timeoutMs: 60_000, intervalMs: 50 },
    );
    const victim = peers[["s1", "s2", "s3"].indexOf(coordinator)];
    if (!victim) throw new Error(`no process for coordinator ${coordinator}`);
    await victim.kill("SIGKILL");
    const ended = await slotEnded("sharded", 90_000);
    expect(ended.slots).toEqual([
      { outcome: "succeeded", reduce_state: "succeeded", reduce_runs: 1, round: 1 },
    ]);
    const shards = await shardRecords("sharded");
    expect(shards).toHaveLength(SHARDS);
    expect(shards.filter((shard) => shard.state !== "succeeded")).toEqual([]);
    // the shards the dead instance was running were claimed again: a second claim, by a live instance
    const rerun = shards.filter((shard) => shard.runs > 1);
    expect(rerun.every((shard) => shard.holder !== coordinator)).toBe(true);
    const { rows: calls } = await suite.db.pool.query<{ shard_index: number }>(
      "SELECT DISTINCT shard_index FROM shard_calls WHERE task = 'sharded' AND instance = $1",
      [coordinator],
    );
    const endedByVictim = new Set(
      shards.filter((shard) => shard.holder === coordinator).map((s) => s.shard_index),
    );
    const cutOff = calls.map((call) => call.shard_index).filter((index) => !endedByVictim.has(index));
    expect(cutOff.length).toBeGreaterThan(0); // it was running shards when it died
    expect(await reduces("sharded")).toEqual([
      expect.objectContaining({
        results: SHARDS,
        succeeded: SHARDS,
        value_sum: String(sumOfIndexes(SHARDS)),
      }),
    ]);
    const reduceInstance = (await reduces("sharded"))[0]?.instance;
    expect(reduceInstance).not.toBe(coordinator);
  }, 150_000);
});

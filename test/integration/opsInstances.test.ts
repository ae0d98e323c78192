import { writeFile } from "node:fs/promises";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { runCli } from "../../src/cli/main.js";
import { type ConfigEntry, yamlOf } from "../helpers/harness.js";
import { pollUntil } from "../helpers/poll.js";
import type { ServiceProcess } from "../helpers/processes.js";
import { fixtureInstance, processSuite } from "../helpers/processSuite.js";
import { STARTS } from "../helpers/runStarts.js";

/**
 * Pause all, the instances and the run search (docs/operations.md) on service processes against
 * one PostgreSQL: the switch reaches every instance, lifting it applies catch-up, a SIGKILLed
 * instance shows dead with the runs handed over, and runs are found by words in their error and
 * log lines.
 */

const suite = processSuite("ops");
const TOKEN = "ops-operator-token-0123456789";
const VIEWER = "ops-viewer-token-0123456789";
const PERIOD = 2_000;

async function cluster(names: string[], config: ConfigEntry[], environment: NodeJS.ProcessEnv = {}) {
  const configFile = path.join(suite.dir, `${names.join("-")}.yaml`);
  await writeFile(configFile, yamlOf(config));
  const peers = names.map((name) =>
    fixtureInstance(suite, name, configFile, {
      CRONWARDEN_TOKENS: `ops:operator:${TOKEN},watcher:viewer:${VIEWER}`,
      ...environment,
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
  return { peers, urls };
}

async function call(url: string, method: string, route: string, body?: unknown, token = TOKEN) {
  const response = await fetch(`${url}${route}`, {
    method,
    headers: {
      authorization: `Bearer ${token}`,
      ...(body === undefined ? {} : { "content-type": "application/json" }),
    },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  return { status: response.status, json: (await response.json()) as Record<string, unknown> & unknown[] };
}

async function cli(url: string, argv: string[]) {
  const out: string[] = [];
  const err: string[] = [];
  const code = await runCli(argv, {
    out: (line) => out.push(line),
    err: (line) => err.push(line),
    env: { CRONWARDEN_ADMIN_URL: url, CRONWARDEN_ADMIN_TOKEN: TOKEN },
    cwd: process.cwd(),
  });
  return { code, out, err };
}

interface Record_ {
  slot: number;
  outcome: string;
  started: Date;
  detail: string | null;
}

async function records(task: string): Promise<Record_[]> {
  const { rows } = await suite.db.pool.query<{
    slot: string;
    outcome: string;
    started: Date;
    detail: string | null;
  }>(
    `SELECT meta->>'scheduledAt' AS slot, meta->>'outcome' AS outcome, timestamp AS started, meta->>'detail' AS detail
       FROM agenda_logs WHERE job_name = $1 AND event IN ('success', 'fail') AND meta ? 'outcome'`,
    [task],
  );
  return rows.map((row) => ({ ...row, slot: Date.parse(row.slot) })).sort((a, b) => a.slot - b.slot);
}

/** Runs started for a slot after `after`. */
async function starts(task: string, after: Date): Promise<number> {
  const { rows } = await suite.db.pool.query<{ n: number }>(
    `SELECT count(*)::int AS n FROM ${STARTS} WHERE job_name = $1 AND (meta->>'scheduledAt')::timestamptz > $2`,
    [task, after],
  );
  return rows[0]?.n ?? 0;
}

async function dbNow(): Promise<Date> {
  const { rows } = await suite.db.pool.query<{ now: Date }>("SELECT clock_timestamp() AS now");
  return rows[0]?.now as Date;
}

describe("pause all", () => {
  it("stops runs on both instances without touching the rows; lifting it follows catch-up: a pause within the grace runs the stored slot late and records the later ones skipped", async () => {
    const { peers, urls } = await cluster(
      ["pa1", "pa2"],
      [
        { name: "quick", cron: "*/2 * * * * *", catchUp: { runs: "latest", window: "1h" } },
        { name: "slow", enabled: false },
      ],
    );
    const [url1, url2] = urls as [string, string];
    await pollUntil(
      "two runs before the pause",
      async () => ((await records("quick")).length >= 2 ? true : undefined),
      {
        timeoutMs: 30_000,
      },
    );
    const jobBefore = await suite.db.pool.query(
      "SELECT disabled, repeat_interval, data->'policy' AS policy FROM agenda_jobs WHERE name = 'quick'",
    );

    // a viewer may not flip the switch; an operator must say why
    expect((await call(url1, "POST", "/pause-all", { reason: "x" }, VIEWER)).status).toBe(403);
    expect((await call(url1, "POST", "/pause-all", {})).status).toBe(400);
    const paused = await call(url1, "POST", "/pause-all", { reason: "database incident" });
    expect(paused.status).toBe(200);
    expect(paused.json).toMatchObject({
      paused: true,
      changed: true,
      pause: { pausedBy: "ops", reason: "database incident" },
    });
    // heard by the other instance through the notification, not a poll of the switch
    for (const peer of peers)
      await peer.waitFor("the pause", (line) => /^pause-all is on/.test(String(line.msg)), 10_000);
    const pausedAt = await dbNow();

    // shown by /readyz (still ready) and GET /pause-all on the other instance
    const ready = await fetch(`${url2}/readyz`);
    expect(ready.status).toBe(200);
    // since when, not who or why: /readyz answers without a token
    const readiness = (await ready.json()) as { ready: boolean; pausedAll: Record<string, unknown> };
    expect(readiness.ready).toBe(true);
    expect(Object.keys(readiness.pausedAll)).toEqual(["pausedAt"]);
    expect(Date.parse(String(readiness.pausedAll.pausedAt))).not.toBeNaN();
    expect((await call(url2, "GET", "/pause-all")).json).toMatchObject({
      paused: true,
      pause: { reason: "database incident", pausedBy: "ops" },
    });

    // three slots fall due while paused (by the database's clock), and none starts
    await pollUntil(
      "three slots due while paused",
      async () => {
        const { rows } = await suite.db.pool.query(
          "SELECT 1 FROM agenda_jobs WHERE name = 'quick' AND next_run_at < clock_timestamp() - interval '6 seconds'",
        );
        return rows.length === 1 ? true : undefined;
      },
      { timeoutMs: 30_000, intervalMs: 200 },
    );
    // a run whose checks passed before the pause arrived (its start-ahead, 300 ms here) may still
    // start; no slot after that does
    expect(await starts("quick", new Date(pausedAt.getTime() + PERIOD / 2))).toBe(0);
    const jobDuring = await suite.db.pool.query(
      "SELECT disabled, repeat_interval, data->'policy' AS policy, locked_at FROM agenda_jobs WHERE name = 'quick'",
    );
    expect(jobDuring.rows[0]).toMatchObject({ ...jobBefore.rows[0], locked_at: null });
    const before = (await records("quick")).at(-1)?.slot as number;

    const resumed = await cli(url2, ["resume-all", "--reason", "incident over"]);
    expect(resumed).toMatchObject({ code: 0, err: [] });
    expect(resumed.out[0]).toMatch(/^resumed every task/);
    const liftedAt = await dbNow();

    // every slot of the pause has a record, as after any stop shorter than the missed-slot grace
    // (docs/behaviour.md, "Every slot ends with a run or a record"): the stored slot runs late, the
    // slots after it that are past when it starts are recorded skipped
    const missed = await pollUntil(
      "the catch-up after the lift",
      async () => {
        const all = (await records("quick")).filter(
          (row) => row.slot > before && row.slot <= liftedAt.getTime(),
        );
        const ran = all.filter((row) => row.outcome === "succeeded");
        const expected = Math.floor((liftedAt.getTime() - before) / PERIOD);
        return ran.length >= 1 && all.length >= expected ? all : undefined;
      },
      { timeoutMs: 30_000, intervalMs: 200 },
    );
    const ran = missed.filter((row) => row.outcome === "succeeded");
    const skipped = missed.filter((row) => row.outcome === "skipped");
    expect(ran).toHaveLength(1);
    expect(skipped.length).toBeGreaterThanOrEqual(2);
    expect(ran[0]?.slot).toBe(Math.min(...missed.map((row) => row.slot)));
    expect(ran[0]?.slot).toBe(before + PERIOD);
    expect(skipped.every((row) => /the oldest missed slot runs/.test(row.detail ?? ""))).toBe(true);
    expect(new Set(missed.map((row) => row.slot)).size).toBe(missed.length);

    // audited: who and why, both ways
    const { rows: audit } = await suite.db.pool.query(
      "SELECT kind, task, actor, new_value, source FROM cronwarden_audit WHERE kind IN ('pause-all', 'resume-all') ORDER BY id",
    );
    expect(audit).toEqual([
      { kind: "pause-all", task: "*", actor: "ops", new_value: "on: database incident", source: "admin API" },
      { kind: "resume-all", task: "*", actor: "ops", new_value: "off: incident over", source: "admin API" },
    ]);
  }, 120_000);
});

describe("pause all on three instances", () => {
  const TASKS = 60;
  const herd = Array.from({ length: TASKS }, (_, index) => `herd-${String(index).padStart(3, "0")}`);

  it(`${TASKS} tasks on 3 instances: no run starts on an instance after it applied the switch (from the record), and lifting it gives every slot of the pause its run or record`, async () => {
    const { peers, urls } = await cluster(
      ["pb1", "pb2", "pb3"],
      [
        ...herd.map((name) => ({ name, cron: "*/2 * * * * *" })),
        { name: "quick", enabled: false },
        { name: "slow", enabled: false },
      ],
      { HERD_TASKS: String(TASKS), HERD_TASK_MS: "50", LOG_LEVEL: "info" },
    );
    const startsOn = async (after: Date) =>
      (
        await suite.db.pool.query<{ instance: string; n: number; last: Date }>(
          `SELECT coalesce(meta->>'instanceId', agenda_name) AS instance, count(*)::int AS n, max(timestamp) AS last
             FROM ${STARTS} WHERE job_name LIKE 'herd-%' AND timestamp > $1 GROUP BY 1`,
          [after],
        )
      ).rows;
    // every task has run before the pause (which instance runs what is the claims' race, not asked
    // here: the switch must hold on each of the three whatever it runs)
    await pollUntil(
      `a run of each of the ${TASKS} tasks`,
      async () =>
        (
          await suite.db.pool.query<{ n: number }>(
            "SELECT count(DISTINCT job_name)::int AS n FROM agenda_logs WHERE job_name LIKE 'herd-%' AND event = 'success'",
          )
        ).rows[0]?.n === TASKS,
      { timeoutMs: 60_000, intervalMs: 200 },
    );

    const paused = await call(urls[1] as string, "POST", "/pause-all", { reason: "incident drill" });
    expect(paused.status).toBe(200);
    const switched = (
      await suite.db.pool.query<{ paused_at: Date }>("SELECT paused_at FROM cronwarden_pause")
    ).rows[0]?.paused_at as Date;
    // when each instance applied it: its own log line, written once its gate holds the switch
    const heard = await Promise.all(
      peers.map(async (peer) => {
        const line = await peer.waitFor(
          "the pause",
          (entry) => /^pause-all is on/.test(String(entry.msg)),
          20_000,
        );
        return new Date(Number(line.time));
      }),
    );
    for (const at of heard) expect(at.getTime()).toBeGreaterThanOrEqual(switched.getTime() - 50);

    // three periods of the herd pass by the database's clock, the switch still on
    await pollUntil(
      "three periods past the switch",
      async () =>
        (
          await suite.db.pool.query(
            "SELECT 1 FROM cronwarden_pause WHERE clock_timestamp() > paused_at + interval '6 seconds'",
          )
        ).rows.length === 1,
      { timeoutMs: 30_000, intervalMs: 200 },
    );
    // the record: on each instance, every run of every task started before that instance applied
    // the switch (a handler starts only after its last pause check, src/engine/taskRunner.ts)
    const after = await startsOn(switched);
    for (const [index, peer] of ["pb1", "pb2", "pb3"].entries()) {
      const last = after.find((row) => row.instance === peer)?.last;
      if (last) expect(last.getTime(), peer).toBeLessThanOrEqual((heard[index] as Date).getTime());
    }
    // and no job row was changed: every task is as enabled and timed as before
    const { rows: rowsDuring } = await suite.db.pool.query<{ n: number }>(
      "SELECT count(*)::int AS n FROM agenda_jobs WHERE name LIKE 'herd-%' AND disabled = false AND locked_at IS NULL",
    );
    expect(rowsDuring[0]?.n).toBe(TASKS);
    const lastBefore = new Map<string, number>();
    for (const name of herd) lastBefore.set(name, (await records(name)).at(-1)?.slot ?? 0);

    expect((await cli(urls[2] as string, ["resume-all", "--reason", "drill over"])).code).toBe(0);
    const liftedAt = await dbNow();
    // each task: every slot of the pause has its run or its record (a pause shorter than the
    // missed-slot grace: the stored slot runs late, the later past slots are recorded skipped)
    for (const name of herd) {
      const before = lastBefore.get(name) as number;
      const missed = await pollUntil(
        `${name}: a record for every slot of the pause`,
        async () => {
          const all = (await records(name)).filter(
            (row) => row.slot > before && row.slot <= liftedAt.getTime(),
          );
          const expected = Math.floor((liftedAt.getTime() - before) / PERIOD);
          return all.some((row) => row.outcome === "succeeded") && all.length >= expected ? all : undefined;
        },
        { timeoutMs: 30_000, intervalMs: 200 },
      );
      const ran = missed.filter((row) => row.outcome === "succeeded");
      expect(
        ran.map((row) => row.slot),
        name,
      ).toEqual([before + PERIOD]);
      expect(
        missed
          .filter((row) => row.outcome === "skipped")
          .every((row) => /the oldest missed slot runs/.test(row.detail ?? "")),
        name,
      ).toBe(true);
      expect(new Set(missed.map((row) => row.slot)).size, name).toBe(missed.length);
    }
    // and the herd runs on after the catch-up
    const resumed = await pollUntil(
      "runs of the herd started after the lift",
      async () => {
        const rows = await startsOn(liftedAt);
        return rows.reduce((sum, row) => sum + row.n, 0) >= TASKS && rows;
      },
      { timeoutMs: 30_000, intervalMs: 200 },
    );
    expect(resumed.length).toBeGreaterThan(0);
  }, 180_000);
});

describe("instances", () => {
  it("lists both instances live with their details; a SIGKILLed one shows dead with the run it had handed over", async () => {
    const { peers, urls } = await cluster(
      ["in1", "in2"],
      [
        { name: "quick", enabled: false },
        { name: "slow", cron: "*/2 * * * * *" },
      ],
      { SLOW_TASK_MS: "120000" },
    );
    // instances of this test only (the earlier test's processes were killed and show dead)
    const ours = (rows: unknown) =>
      (rows as Array<Record<string, unknown>>).filter((row) => /^in[12]$/.test(String(row.id)));
    const live = ours((await call(urls[0] as string, "GET", "/instances")).json);
    expect(live.map((row) => [row.id, row.state])).toEqual([
      ["in1", "live"],
      ["in2", "live"],
    ]);
    for (const row of live) {
      expect(row).toMatchObject({
        concurrency: expect.any(Number),
        version: expect.stringMatching(/^\d+\.\d+/),
      });
      expect(String(row.host).length).toBeGreaterThan(0);
      expect(Date.parse(String(row.startedAt))).not.toBeNaN();
      expect(Date.parse(String(row.lastSeenAt))).not.toBeNaN();
    }
    // the slow run's owner shows it in progress
    const owner = await pollUntil(
      "the slow run in progress",
      async () => {
        const rows = ours((await call(urls[0] as string, "GET", "/instances")).json);
        return rows.find((row) => row.runsInProgress === 1);
      },
      { timeoutMs: 30_000, intervalMs: 200 },
    );
    const victim = peers[owner.id === "in1" ? 0 : 1] as ServiceProcess;
    const survivorUrl = urls[owner.id === "in1" ? 1 : 0] as string;
    await victim.kill("SIGKILL");

    const dead = await pollUntil(
      "the death recorded",
      async () => {
        const rows = ours((await call(survivorUrl, "GET", "/instances")).json);
        return rows.find((row) => row.id === owner.id && row.diedAt !== undefined);
      },
      { timeoutMs: 30_000, intervalMs: 200 },
    );
    expect(dead).toMatchObject({
      state: "dead",
      handedOver: ["slow"],
      seenBy: expect.stringMatching(/^in[12]$/),
    });

    const listed = await cli(survivorUrl, ["instances"]);
    expect(listed.code).toBe(0);
    expect(listed.out[0]).toMatch(
      /^INSTANCE\s+STATE\s+HOST\s+VERSION\s+STARTED\s+LAST SEEN\s+RUNNING\s+CONCURRENCY\s+NOTE$/,
    );
    expect(listed.out.find((line) => line.startsWith(`${owner.id} `))).toMatch(/\bdead\b.*handed over: slow/);
    expect(listed.out.find((line) => line.startsWith(`${survivorUrl === urls[0] ? "in1" : "in2"} `))).toMatch(
      /\blive\b/,
    );
    expect(listed.out.at(-1)).toMatch(/^1 live, \d+ dead$/);
  }, 120_000);
});

describe("search runs", () => {
  it("finds runs by a word of their error and of their log lines, with task, outcome and time filters", async () => {
    const { urls } = await cluster(
      ["se1"],
      [
        { name: "quick", cron: "*/2 * * * * *" },
        { name: "slow", enabled: false },
        { name: "chatty", cron: "*/2 * * * * *" },
        { name: "flaky", cron: "*/2 * * * * *" },
      ],
      { SEARCH_TASKS: "1" },
    );
    const url = urls[0] as string;
    const search = async (query: string) =>
      (await call(url, "GET", `/runs/search?${query}`)).json as unknown as {
        runs: Array<{ task: string; outcome: string; error: string | null; recordedAt: string }>;
        nextCursor: string | null;
      };
    const byError = await pollUntil(
      "flaky's failures found by ECONNRESET",
      async () => {
        const page = await search("q=ECONNRESET");
        return page.runs.length >= 2 ? page : undefined;
      },
      { timeoutMs: 30_000, intervalMs: 300 },
    );
    expect(new Set(byError.runs.map((run) => run.task))).toEqual(new Set(["flaky"]));
    expect(byError.runs.every((run) => run.outcome === "failed" && /ECONNRESET/.test(run.error ?? ""))).toBe(
      true,
    );

    const byLog = await search("q=warehouse-zebra");
    expect(byLog.runs.length).toBeGreaterThanOrEqual(1);
    expect(new Set(byLog.runs.map((run) => run.task))).toEqual(new Set(["chatty"]));
    expect(byLog.runs.every((run) => run.outcome === "succeeded")).toBe(true);

    // filters: the word with another task, or another outcome, finds nothing
    expect((await search("q=ECONNRESET&task=chatty")).runs).toEqual([]);
    expect((await search("q=ECONNRESET&outcome=succeeded")).runs).toEqual([]);
    expect((await search("task=quick&outcome=succeeded&limit=1")).runs.map((run) => run.task)).toEqual([
      "quick",
    ]);
    // a time range before the first run finds nothing; one around now finds them
    expect((await search("q=ECONNRESET&to=2020-01-01T00:00:00Z")).runs).toEqual([]);
    const newest = byError.runs[0]?.recordedAt as string;
    const windowed = await search(`q=ECONNRESET&from=${encodeURIComponent(newest)}`);
    expect(windowed.runs.map((run) => run.recordedAt)).toContain(newest);
    // pages: newest first, a cursor for the rest
    const first = await search("task=quick&limit=1");
    expect(first.nextCursor).not.toBeNull();
    const second = await search(`task=quick&limit=1&cursor=${first.nextCursor}`);
    expect(Date.parse(second.runs[0]?.recordedAt as string)).toBeLessThanOrEqual(
      Date.parse(first.runs[0]?.recordedAt as string),
    );
    // bad input is named
    const bad = await call(url, "GET", "/runs/search?outcome=broken");
    expect(bad.status).toBe(400);
    expect(String(bad.json.error)).toMatch(
      /outcome must be succeeded, failed, skipped, interrupted or lock-lost/,
    );

    const printed = await cli(url, ["search", "--text", "ECONNRESET", "--task", "flaky", "--limit", "5"]);
    expect(printed.code).toBe(0);
    expect(printed.out[0]).toMatch(/^RECORDED\s+TASK\s+SCHEDULED\s+OUTCOME\s+INSTANCE\s+ERROR\s+RUN$/);
    expect(printed.out.slice(1, -1).every((line) => /\bflaky\b.*\bfailed\b.*ECONNRESET/.test(line))).toBe(
      true,
    );
  }, 120_000);
});

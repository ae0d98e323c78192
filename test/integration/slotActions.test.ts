import { writeFile } from "node:fs/promises";
import path from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { runCli } from "../../src/cli/main.js";
import { yamlOf } from "../helpers/harness.js";
import { pollUntil } from "../helpers/poll.js";
import { ServiceProcess } from "../helpers/processes.js";
import { processSuite } from "../helpers/processSuite.js";

/** Re-run a slot and backfill a range (docs/operations.md), as OS processes against one PostgreSQL. */

const suite = processSuite("slot-actions");
const TOKEN = "slot-actions-operator-0123456789";

interface Call {
  task: string;
  slot: Date;
  run_key: string;
  trigger: string;
  instance: string;
  rerun_of_started_at: Date | null;
  started_at: Date;
  ended_at: Date | null;
}

beforeEach(async () => {
  await suite.db.pool.query(`CREATE TABLE IF NOT EXISTS slot_calls (
    id SERIAL PRIMARY KEY, task TEXT, slot TIMESTAMPTZ, run_key TEXT, trigger TEXT, attempt INT,
    instance TEXT, rerun_of_started_at TIMESTAMPTZ, started_at TIMESTAMPTZ, ended_at TIMESTAMPTZ)`);
});

afterEach(async () => {
  await suite.db.pool.query("DROP TABLE IF EXISTS slot_calls");
  await suite.db.pool.query("DELETE FROM cronwarden_backfills").catch(() => {});
});

async function configFile(name: string, config: Parameters<typeof yamlOf>[0]): Promise<string> {
  const file = path.join(suite.dir, `${name}.yaml`);
  await writeFile(file, yamlOf(config));
  return file;
}

async function instance(name: string, file: string, extra: NodeJS.ProcessEnv = {}) {
  const child = new ServiceProcess("test/fixtures/slotsInstance.ts", {
    DATABASE_URL: suite.db.url,
    CRONWARDEN_CONFIG_FILE: file,
    CRONWARDEN_INSTANCE_ID: name,
    CRONWARDEN_MIN_INTERVAL_MS: "1000",
    CRONWARDEN_PROCESS_EVERY_MS: "500",
    CRONWARDEN_LIVENESS_CHECK_MS: "500",
    CRONWARDEN_LOCK_LIFETIME_MS: "6000",
    CRONWARDEN_ADMIN_TOKEN: TOKEN,
    LOG_LEVEL: "info",
    ...extra,
  });
  suite.processes.push(child);
  const listening = await child.waitFor(`${name}'s admin API`, (line) =>
    /^admin API listening/.test(String(line.msg)),
  );
  await child.waitFor(`${name} to start`, (line) => /^scheduler started/.test(String(line.msg)));
  return { child, url: String(listening.url) };
}

async function api(url: string, method: string, route: string, body?: unknown) {
  const response = await fetch(`${url}${route}`, {
    method,
    headers: {
      authorization: `Bearer ${TOKEN}`,
      ...(body === undefined ? {} : { "content-type": "application/json" }),
    },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await response.text();
  return { status: response.status, json: text ? (JSON.parse(text) as Record<string, unknown>) : {} };
}

/** The CLI in-process against an instance's admin API. */
async function cli(url: string, ...argv: string[]) {
  const out: string[] = [];
  const err: string[] = [];
  const code = await runCli(argv, {
    out: (line) => out.push(line),
    err: (line) => err.push(line),
    env: { CRONWARDEN_ADMIN_URL: url, CRONWARDEN_ADMIN_TOKEN: TOKEN },
    cwd: suite.dir,
  });
  return { code, out, err };
}

async function calls(task: string): Promise<Call[]> {
  const result = await suite.db.pool.query<Call>(
    "SELECT task, slot, run_key, trigger, instance, rerun_of_started_at, started_at, ended_at FROM slot_calls WHERE task = $1 ORDER BY started_at, id",
    [task],
  );
  return result.rows;
}

async function outcomes(task: string, trigger: string) {
  const result = await suite.db.pool.query<{ slot: string; outcome: string; by: string | null }>(
    `SELECT meta->>'scheduledAt' AS slot, meta->>'outcome' AS outcome, meta->>'requestedBy' AS by
       FROM agenda_logs WHERE job_name = $1 AND event IN ('success', 'fail')
        AND coalesce(meta->>'trigger', 'schedule') = $2 ORDER BY timestamp, id`,
    [task, trigger],
  );
  return result.rows;
}

describe("re-run a slot", () => {
  it("re-runs a failed slot under its own scheduledAt and runKey; of two concurrent requests one runs and one gets 409", async () => {
    const file = await configFile("rerun", [{ name: "repair", cron: "*/2 * * * * *" }]);
    const [a, b] = await Promise.all([instance("rerun-a", file), instance("rerun-b", file)]);
    const failed = await pollUntil(
      "a failed scheduled run of repair",
      async () => (await outcomes("repair", "schedule"))[0],
      {
        timeoutMs: 20_000,
      },
    );
    expect(failed.outcome).toBe("failed");
    // no more live runs: the re-run is the only run left to see
    await writeFile(file, yamlOf([{ name: "repair", cron: "0 0 0 1 1 *" }]));
    await pollUntil("the new schedule in force", async () => {
      const job = await suite.db.pool.query<{ repeat_interval: string; locked_at: Date | null }>(
        "SELECT repeat_interval, locked_at FROM agenda_jobs WHERE name = 'repair'",
      );
      return job.rows[0]?.repeat_interval === "0 0 0 1 1 *" && job.rows[0].locked_at === null;
    });
    const slot = failed.slot;
    const original = (await calls("repair")).find((call) => call.slot.toISOString() === slot);
    expect(original?.trigger).toBe("schedule");

    const route = `/tasks/repair/slots/${encodeURIComponent(slot)}/rerun`;
    const answers = await Promise.all([
      api(a.url, "POST", route, { reason: "fixed the upstream URL" }),
      api(b.url, "POST", route, { reason: "fixed the upstream URL" }),
    ]);
    expect(answers.map((answer) => answer.status).sort()).toEqual([202, 409]);
    const queued = answers.find((answer) => answer.status === 202)?.json;
    expect(queued).toMatchObject({ status: "queued", taskName: "repair", runKey: `repair@${slot}` });

    const rerun = await pollUntil("the re-run's outcome", async () => (await outcomes("repair", "rerun"))[0]);
    expect(rerun).toEqual({ slot, outcome: "succeeded", by: "admin" });
    const handled = (await calls("repair")).filter((call) => call.trigger === "rerun");
    expect(handled).toHaveLength(1);
    expect(handled[0]?.slot.toISOString()).toBe(slot);
    expect(handled[0]?.run_key).toBe(`repair@${slot}`);
    // rerunOf: the slot's failed run, as its record has it
    const failedRun = await suite.db.pool.query<{ started: string }>(
      "SELECT meta->>'startedAt' AS started FROM agenda_logs WHERE job_name = 'repair' AND event = 'fail' AND meta->>'scheduledAt' = $1",
      [slot],
    );
    expect(handled[0]?.rerun_of_started_at?.toISOString()).toBe(failedRun.rows[0]?.started);

    await pollUntil("the re-run's end saved", async () => {
      const job = await suite.db.pool.query(
        "SELECT locked_at, last_run_at, last_finished_at FROM agenda_jobs WHERE name = 'repair'",
      );
      const row = job.rows[0];
      return row?.locked_at === null && row.last_finished_at >= row.last_run_at;
    });
    // the slot's two attempts on the timeline: the failed one and the re-run
    const slotTime = new Date(slot).getTime();
    const timeline = await api(
      a.url,
      "GET",
      `/slots?tasks=repair&from=${new Date(slotTime - 1000).toISOString()}&to=${new Date(Date.now() + 1000).toISOString()}`,
    );
    const marks = (timeline.json.marks as { slot: string; outcome: string; trigger: string }[]).filter(
      (mark) => mark.slot === slot,
    );
    expect(marks.map((mark) => `${mark.trigger}:${mark.outcome}`).sort()).toEqual([
      "rerun:succeeded",
      "schedule:failed",
    ]);

    // audited: who, when, why
    const audit = await suite.db.pool.query(
      "SELECT kind, field, old_value, new_value, actor, source FROM cronwarden_audit WHERE task = 'repair' AND kind = 'rerun'",
    );
    expect(audit.rows).toEqual([
      {
        kind: "rerun",
        field: slot,
        old_value: "failed",
        new_value: "rerun; reason: fixed the upstream URL",
        actor: "admin",
        source: "admin API",
      },
    ]);

    // the slot succeeded now: a re-run needs force
    await pollUntil("the re-run's end saved", async () => {
      const job = await suite.db.pool.query("SELECT locked_at FROM agenda_jobs WHERE name = 'repair'");
      return job.rows[0]?.locked_at === null;
    });
    const refused = await cli(a.url, "rerun", "repair", "--slot", slot);
    expect(refused.code).toBe(1);
    expect(refused.err.join("\n")).toContain("force");
    const forced = await cli(b.url, "rerun", "repair", "--slot", slot, "--force", "--reason", "again");
    expect(forced).toMatchObject({
      code: 0,
      out: [`queued a re-run of repair@${slot} (its last run succeeded) by admin`],
    });
    await pollUntil("the forced re-run", async () => (await outcomes("repair", "rerun")).length === 2);

    // a slot with no run recorded is a backfill's, not a re-run's
    const never = await api(a.url, "POST", "/tasks/repair/slots/2020-01-01T00:00:00.000Z/rerun", {});
    expect(never.status).toBe(404);
    expect(String(never.json.error)).toContain("backfill");
  }, 60_000);
});

interface Progress {
  id: string;
  state: string;
  slots: Record<"total" | "pending" | "running" | "succeeded" | "failed" | "skipped" | "cancelled", number>;
}

/** Slots of a cron of every 2 seconds, oldest first, from `from` (on a slot) for `count` slots. */
function everyTwoSeconds(from: number, count: number): string[] {
  return Array.from({ length: count }, (_, index) => new Date(from + index * 2_000).toISOString());
}

describe("backfill", () => {
  it("200 slots at concurrency 10 on 3 instances, one SIGKILLed midway: each slot one success, progress right, live slots keep running", async () => {
    const file = await configFile("backfill", [{ name: "hourly", cron: "*/2 * * * * *" }]);
    const peers = await Promise.all(
      ["bf-a", "bf-b", "bf-c"].map((name) => instance(name, file, { HOURLY_TASK_MS: "300" })),
    );
    const [a, b, c] = peers as [(typeof peers)[0], (typeof peers)[0], (typeof peers)[0]];
    // a range of the past with no run: every slot is missing
    const from = Math.floor((Date.now() - 3_600_000) / 2_000) * 2_000;
    const expected = everyTwoSeconds(from, 200);
    const to = expected.at(-1) as string;

    const dry = await api(a.url, "POST", "/tasks/hourly/backfills", {
      from: new Date(from).toISOString(),
      to,
      dryRun: true,
    });
    expect(dry.status).toBe(200);
    expect(dry.json).toMatchObject({ dryRun: true, run: 200, skip: 0 });
    expect((dry.json.slots as { slot: string }[]).map((slot) => slot.slot)).toEqual(expected);
    expect((await suite.db.pool.query("SELECT count(*)::int AS n FROM cronwarden_backfills")).rows).toEqual([
      { n: 0 },
    ]);

    const created = await api(a.url, "POST", "/tasks/hourly/backfills", {
      from: new Date(from).toISOString(),
      to,
      concurrency: 10,
      reason: "replay after the parser fix",
    });
    expect(created.status).toBe(201);
    const id = String(created.json.id);
    const startedAt = Date.now();
    // an overlapping second backfill would run slots twice: refused
    const overlapping = await api(b.url, "POST", "/tasks/hourly/backfills", { from: to, to, mode: "all" });
    expect(overlapping.status).toBe(409);

    // progress read through another instance, at every step: the counts always add up to 200, and
    // never count a slot succeeded before its success record exists (a slot is marked after its
    // record is written: src/engine/backfillRunner.ts endRun), read from the run log just after
    const seen: Progress[] = [];
    const recordedAfter: number[] = [];
    const recorded = async () =>
      (
        await suite.db.pool.query<{ n: number }>(
          `SELECT count(DISTINCT meta->>'scheduledAt')::int AS n FROM agenda_logs
            WHERE job_name = 'hourly' AND event = 'success' AND meta->>'outcome' = 'succeeded'
              AND meta->>'trigger' = 'backfill'`,
        )
      ).rows[0]?.n ?? 0;
    const progress = async () => {
      const answer = (await api(c.url, "GET", `/backfills/${id}`)).json as unknown as Progress;
      seen.push(answer);
      recordedAfter.push(await recorded());
      return answer;
    };
    await pollUntil(
      "bf-b running backfill slots, 40 done",
      async () => {
        const running = await suite.db.pool.query(
          "SELECT count(*)::int AS n FROM cronwarden_backfill_slots WHERE locked_by = 'bf-b' AND state = 'running' AND started_at IS NOT NULL",
        );
        return (await progress()).slots.succeeded >= 40 && (running.rows[0]?.n ?? 0) > 0;
      },
      { timeoutMs: 60_000, intervalMs: 20 },
    );
    await b.child.kill("SIGKILL");
    const killedAt = Date.now();
    const done = await pollUntil(
      "the backfill done",
      async () => ((await progress()).state === "done" ? seen.at(-1) : undefined),
      {
        timeoutMs: 90_000,
        intervalMs: 100,
      },
    );
    const endedAt = Date.now();
    expect(done?.slots).toMatchObject({ total: 200, succeeded: 200, pending: 0, running: 0, failed: 0 });
    for (const step of seen) expect(step.slots.total).toBe(200);
    for (const [index, step] of seen.entries())
      expect(step.slots.succeeded).toBeLessThanOrEqual(recordedAfter[index] ?? Number.NaN);
    expect(await recorded()).toBe(done?.slots.succeeded);
    const succeededSeen = seen.map((step) => step.slots.succeeded);
    expect(succeededSeen).toEqual([...succeededSeen].sort((x, y) => (x ?? 0) - (y ?? 0)));

    // the slots bf-b held when it died were taken over by the others
    const takenOver = await suite.db.pool.query<{ n: number }>(
      "SELECT count(*)::int AS n FROM cronwarden_backfill_slots WHERE backfill_id = $1 AND runs > 1",
      [id],
    );
    expect(takenOver.rows[0]?.n).toBeGreaterThan(0);
    // each slot: exactly one success record, with trigger backfill and who asked
    const records = await outcomes("hourly", "backfill");
    expect(
      records
        .filter((record) => record.outcome === "succeeded")
        .map((record) => record.slot)
        .sort(),
    ).toEqual(expected);
    expect(new Set(records.map((record) => record.by))).toEqual(new Set(["admin"]));
    // the handler saw each slot's own identity
    const handled = (await calls("hourly")).filter((call) => call.trigger === "backfill");
    for (const call of handled) expect(call.run_key).toBe(`hourly@${call.slot.toISOString()}`);
    expect(new Set(handled.map((call) => call.slot.toISOString()))).toEqual(new Set(expected));
    // at most 10 at a time across the instances (a killed handler ended with its process)
    const events = handled.flatMap((call) => [
      { at: call.started_at.getTime(), step: 1 },
      { at: call.ended_at?.getTime() ?? killedAt, step: -1 },
    ]);
    events.sort((x, y) => x.at - y.at || x.step - y.step);
    let running = 0;
    let most = 0;
    for (const event of events) {
      running += event.step;
      most = Math.max(most, running);
    }
    expect(most).toBeLessThanOrEqual(10);
    // in slot order: a slot starts only once those ten or more before it were claimed
    const firstStarts = [...new Map(handled.map((call) => [call.slot.toISOString(), call])).values()];
    firstStarts.forEach((call, rank) => {
      expect(Math.abs(expected.indexOf(call.slot.toISOString()) - rank)).toBeLessThanOrEqual(10);
    });

    // the live slots kept running meanwhile on the instances alive
    const live = (await outcomes("hourly", "schedule")).filter((record) => {
      const slot = Date.parse(record.slot);
      return slot >= startedAt && slot <= endedAt;
    });
    expect(live.length).toBeGreaterThan(0);
    const liveSlots = everyTwoSeconds(
      Math.ceil(startedAt / 2_000) * 2_000,
      Math.floor((endedAt - startedAt) / 2_000),
    );
    const recordedLive = new Set(live.map((record) => record.slot));
    // every live slot has its record, but those about the kill (taken over after the lock's lifetime)
    const missing = liveSlots.filter(
      (slot) => !recordedLive.has(slot) && Math.abs(Date.parse(slot) - killedAt) > 8_000,
    );
    expect(missing).toEqual([]);

    // audited
    const audit = await suite.db.pool.query(
      "SELECT kind, field, actor, new_value FROM cronwarden_audit WHERE task = 'hourly' AND kind = 'backfill'",
    );
    expect(audit.rows).toEqual([
      {
        kind: "backfill",
        field: id,
        actor: "admin",
        new_value: `${new Date(from).toISOString()} to ${to}, only missing, concurrency 10; reason: replay after the parser fix`,
      },
    ]);
  }, 180_000);

  it("only-missing skips slots that succeeded; cancel stops the pending slots and keeps the finished ones", async () => {
    const file = await configFile("cancel", [{ name: "hourly", cron: "*/2 * * * * *" }]);
    const a = await instance("cancel-a", file, { HOURLY_TASK_MS: "300" });
    const from = Math.floor((Date.now() - 3_600_000) / 2_000) * 2_000;
    const expected = everyTwoSeconds(from, 40);
    const to = expected.at(-1) as string;
    const first = await api(a.url, "POST", "/tasks/hourly/backfills", { from: expected[0], to: expected[4] });
    expect(first.json).toMatchObject({ state: "running" });
    expect(first.status).toBe(201);
    await pollUntil("the first backfill done", async () => {
      const answer = (await api(a.url, "GET", `/backfills/${String(first.json.id)}`))
        .json as unknown as Progress;
      return answer.state === "done";
    });

    const dry = await cli(
      a.url,
      "backfill",
      "hourly",
      "--from",
      expected[0] as string,
      "--to",
      to,
      "--dry-run",
    );
    expect(dry.code).toBe(0);
    expect(dry.out.at(-1)).toBe("35 slot(s) of hourly would run, 5 skipped (dry run: nothing was started)");
    expect(dry.out.filter((line) => line.includes("already succeeded"))).toHaveLength(5);
    const all = await api(a.url, "POST", "/tasks/hourly/backfills", {
      from: expected[0],
      to,
      dryRun: true,
      mode: "all",
    });
    expect(all.json).toMatchObject({ run: 40, skip: 0 });

    const second = await api(a.url, "POST", "/tasks/hourly/backfills", {
      from: expected[0],
      to,
      concurrency: 2,
    });
    expect(second.status).toBe(201);
    expect(second.json).toMatchObject({ slots: { total: 40, skipped: 5 } });
    const id = String(second.json.id);
    await pollUntil("a few slots done", async () => {
      const answer = (await api(a.url, "GET", `/backfills/${id}`)).json as unknown as Progress;
      return answer.slots.succeeded >= 3;
    });
    const cancelled = await cli(a.url, "backfill-cancel", id, "--reason", "wrong range", "--json");
    expect(cancelled.code).toBe(0);
    expect(JSON.parse(cancelled.out.join("\n"))).toMatchObject({ state: "cancelled", cancelledBy: "admin" });
    expect((await cli(a.url, "backfill-cancel", id)).code).toBe(1);
    expect((await api(a.url, "POST", `/backfills/${id}/cancel`, {})).status).toBe(409);
    const listed = await cli(a.url, "backfills", "--task", "hourly");
    expect(listed.out.at(-1)).toBe("2 backfill(s)");
    expect(listed.out.some((line) => line.startsWith(id) && line.includes("cancelled"))).toBe(true);
    const settled = await pollUntil("no slot of the cancelled backfill running", async () => {
      const answer = (await api(a.url, "GET", `/backfills/${id}?slots=100`)).json as unknown as Progress & {
        slotList: { state: string }[];
      };
      return answer.slots.running === 0 ? answer : undefined;
    });
    expect(settled.slots.pending).toBe(0);
    expect(settled.slots.cancelled).toBeGreaterThan(0);
    expect(settled.slots.succeeded + settled.slots.cancelled + settled.slots.skipped).toBe(40);
    // nothing of it runs any more
    const ran = (await calls("hourly")).filter((call) => call.trigger === "backfill").length;
    expect(ran).toBe(5 + settled.slots.succeeded);
    const audit = await suite.db.pool.query(
      "SELECT new_value FROM cronwarden_audit WHERE task = 'hourly' AND kind = 'backfill-cancel'",
    );
    expect(audit.rows).toEqual([{ new_value: "cancelled; reason: wrong range" }]);
  }, 90_000);

  it("survives a restart: SIGTERM mid-backfill drains, and the instance started again finishes it, each slot once", async () => {
    // disabled: no live run, and a backfill runs the slots of its schedule all the same
    const file = await configFile("restart", [{ name: "hourly", cron: "*/2 * * * * *", enabled: false }]);
    const first = await instance("restart-a", file, { HOURLY_TASK_MS: "300" });
    const from = Math.floor((Date.now() - 3_600_000) / 2_000) * 2_000;
    const expected = everyTwoSeconds(from, 30);
    const created = await api(first.url, "POST", "/tasks/hourly/backfills", {
      from: expected[0],
      to: expected.at(-1),
      concurrency: 2,
    });
    expect(created.status).toBe(201);
    const id = String(created.json.id);
    const progress = async (url: string) =>
      (await api(url, "GET", `/backfills/${id}`)).json as unknown as Progress;
    await pollUntil("6 slots done", async () => (await progress(first.url)).slots.succeeded >= 6);
    first.child.kill("SIGTERM");
    expect(await first.child.exited).toEqual({ code: 0, signal: null });
    const between = await suite.db.pool.query<{ state: string; n: number }>(
      "SELECT state, count(*)::int AS n FROM cronwarden_backfill_slots WHERE backfill_id = $1 GROUP BY state ORDER BY state",
      [id],
    );
    // nothing left running: each slot finished or was handed back
    expect(between.rows.find((row) => row.state === "running")).toBeUndefined();
    expect(between.rows.find((row) => row.state === "pending")?.n).toBeGreaterThan(0);

    const second = await instance("restart-a", file, { HOURLY_TASK_MS: "300" });
    const done = await pollUntil("the backfill done after the restart", async () => {
      const answer = await progress(second.url);
      return answer.state === "done" ? answer : undefined;
    });
    expect(done.slots).toMatchObject({ total: 30, succeeded: 30 });
    const records = await outcomes("hourly", "backfill");
    expect(records.map((record) => record.slot).sort()).toEqual(expected);
    expect(records.every((record) => record.outcome === "succeeded")).toBe(true);
  }, 90_000);
});

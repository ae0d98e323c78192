import { writeFile } from "node:fs/promises";
import path from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
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
    const failed = await pollUntil("a failed scheduled run of repair", async () => (await outcomes("repair", "schedule"))[0], {
      timeoutMs: 20_000,
    });
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
    const refused = await api(a.url, "POST", route, {});
    expect(refused.status).toBe(409);
    expect(String(refused.json.error)).toContain("force");
    const forced = await api(b.url, "POST", route, { force: true });
    expect(forced.status).toBe(202);
    await pollUntil("the forced re-run", async () => (await outcomes("repair", "rerun")).length === 2);

    // a slot with no run recorded is a backfill's, not a re-run's
    const never = await api(a.url, "POST", "/tasks/repair/slots/2020-01-01T00:00:00.000Z/rerun", {});
    expect(never.status).toBe(404);
    expect(String(never.json.error)).toContain("backfill");
  }, 60_000);
});

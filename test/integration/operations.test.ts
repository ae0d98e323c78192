import { setTimeout as sleep } from "node:timers/promises";
import { describe, expect, it } from "vitest";
import type { MissedSlotEvent, RunFinishedEvent, RunRetryEvent, TaskContext } from "../../src/index.js";
import { harnessSuite, pollUntil } from "../helpers/harness.js";

/** Retries, run-now, the status view and silent-stop detection, against a real PostgreSQL. */

const suite = harnessSuite();
const start = suite.start;
const db = () => suite.db();

describe("retries", () => {
  it("retries a failed slot with backoff, under the same slot, and records every attempt", async () => {
    const seen: Array<Pick<TaskContext, "attempt" | "scheduledAt">> = [];
    const retries: RunRetryEvent[] = [];
    const finished: RunFinishedEvent[] = [];
    const h = await start(
      [
        {
          name: "retry-flaky",
          retry: { maxRetries: 3, delayMs: 100 },
          handler: async (context) => {
            seen.push({ attempt: context.attempt, scheduledAt: context.scheduledAt });
            if (context.attempt < 3) throw new Error(`flaky failure ${context.attempt}`);
          },
        },
      ],
      [{ name: "retry-flaky", cron: "0 0 0 1 1 *" }],
    );
    h.scheduler.on("run:retry", (event) => retries.push(event));
    h.scheduler.on("run:finished", (event) => finished.push(event));
    expect(await h.scheduler.runNow("retry-flaky")).toMatchObject({ status: "queued" });
    await pollUntil("the third attempt", () => finished.some((event) => event.attempt === 3));
    expect(seen.map((attempt) => attempt.attempt)).toEqual([1, 2, 3]);
    expect(new Set(seen.map((attempt) => attempt.scheduledAt.getTime())).size).toBe(1); // one slot
    expect(retries.map((event) => [event.attempt, event.delayMs])).toEqual([
      [1, 100],
      [2, 200],
    ]);
    expect(finished.map((event) => [event.attempt, event.outcome, event.final])).toEqual([
      [1, "failed", false],
      [2, "failed", false],
      [3, "succeeded", true],
    ]);
    const history = await pollUntil("three history rows", async () => {
      const runs = await h.scheduler.runs("retry-flaky");
      return runs.length >= 3 ? runs : undefined;
    });
    expect(history.map((run) => [run.attempt, run.outcome, run.error, run.trigger])).toEqual([
      [3, "succeeded", null, "manual"],
      [2, "failed", "flaky failure 2", "manual"],
      [1, "failed", "flaky failure 1", "manual"],
    ]);
  });

  it("gives up after maxRetries: the last failure is final and the slot is failed", async () => {
    const finished: RunFinishedEvent[] = [];
    const h = await start(
      [
        {
          name: "retry-broken",
          retry: { maxRetries: 1, delayMs: 50 },
          handler: async () => {
            throw new Error("always broken");
          },
        },
      ],
      [{ name: "retry-broken", cron: "0 0 0 1 1 *" }],
    );
    h.scheduler.on("run:finished", (event) => finished.push(event));
    await h.scheduler.runNow("retry-broken");
    await pollUntil("the final failure", () => finished.some((event) => event.final));
    expect(finished.map((event) => [event.attempt, event.final])).toEqual([
      [1, false],
      [2, true],
    ]);
    // the outcome row and the job row's end are two writes: wait for both (the figures asserted)
    const status = await pollUntil("the status", async () => {
      const found = await h.scheduler.taskStatus("retry-broken");
      return found?.lastOutcome === "failed" && !found.running ? found : undefined;
    });
    expect(status).toMatchObject({ lastError: "always broken", consecutiveFailures: 1, running: false });
  });
});

describe("run now", () => {
  it("queues a run at once; refuses while one runs, for a disabled task, and for an unknown name", async () => {
    let release: () => void = () => {};
    const h = await start(
      [
        {
          name: "now-long",
          handler: () =>
            new Promise<void>((resolve) => {
              release = resolve;
            }),
        },
        { name: "now-off", handler: async () => {} },
      ],
      [
        { name: "now-long", cron: "0 0 0 1 1 *" },
        { name: "now-off", cron: "0 0 0 1 1 *", enabled: false },
      ],
    );
    const started = new Promise<void>((resolve) => h.scheduler.once("run:started", () => resolve()));
    expect(await h.scheduler.runNow("now-long")).toMatchObject({ status: "queued", taskName: "now-long" });
    await started;
    const status = await h.scheduler.taskStatus("now-long");
    expect(status).toMatchObject({ running: true, runningOn: h.scheduler.instanceId });
    expect(await h.scheduler.runNow("now-long")).toMatchObject({ status: "running" });
    expect(await h.scheduler.runNow("now-off")).toMatchObject({ status: "disabled" });
    expect(await h.scheduler.runNow("nope")).toMatchObject({ status: "unknown" });
    const finished = new Promise<void>((resolve) => h.scheduler.once("run:finished", () => resolve()));
    release();
    await finished;
    const [run] = await pollUntil("the record", async () => {
      const runs = await h.scheduler.runs("now-long");
      return runs.length > 0 ? runs : undefined;
    });
    expect(run).toMatchObject({ outcome: "succeeded", trigger: "manual" });
  });
});

describe("status", () => {
  it("joins desired and runtime state for every task, including job rows of unregistered tasks", async () => {
    const h = await start(
      [
        { name: "st-ok", description: "fine", handler: async () => {} },
        {
          name: "st-bad",
          handler: async () => {
            throw new Error("st-bad broke");
          },
        },
      ],
      [{ name: "st-ok" }, { name: "st-bad" }],
    );
    await db().pool.query(
      "INSERT INTO agenda_jobs (name, type, repeat_interval, next_run_at, data) VALUES ('st-legacy', 'single', '* * * * *', now(), '{}')",
    );
    // Waits on the figures asserted below, in one status read: every figure comes from the run log
    // in one statement, so whatever the order in which a run's log row and its job row's save land,
    // the snapshot asserted is consistent. Runs keep coming; nothing below reads twice.
    const isFailed = (outcome: string) => outcome === "failed";
    const all = await pollUntil("two failed slots of st-bad and a succeeded one of st-ok", async () => {
      const statuses = await h.scheduler.status();
      const bad = statuses.find((task) => task.name === "st-bad");
      const ok = statuses.find((task) => task.name === "st-ok");
      return bad?.lastOutcome === "failed" &&
        bad.recentOutcomes.filter(isFailed).length >= 2 &&
        ok?.lastOutcome === "succeeded"
        ? statuses
        : undefined;
    });
    const byName = new Map(all.map((task) => [task.name, task]));
    expect(byName.get("st-ok")).toMatchObject({
      registered: true,
      description: "fine",
      configured: { enabled: true, cron: "* * * * * *", timezone: "UTC" },
      job: { enabled: true, cron: "* * * * * *", timezone: "UTC", nextRunAt: expect.any(Date) },
      lastOutcome: "succeeded",
      lastError: null,
      consecutiveFailures: 0,
      consecutiveFailedAttempts: 0,
    });
    expect(byName.get("st-ok")?.recentOutcomes[0]).toBe("succeeded");
    const bad = byName.get("st-bad");
    expect(bad).toMatchObject({ lastOutcome: "failed", lastError: "st-bad broke" });
    // st-bad never succeeds: every slot it ran failed (a slot skipped under load is neither), so the
    // streak is the failed slots listed (the poll stops at the first read with two, far below the 10 listed)
    const failedListed = bad?.recentOutcomes.filter(isFailed).length ?? 0;
    expect(bad?.recentOutcomes.every((outcome) => outcome === "failed" || outcome === "skipped")).toBe(true);
    expect(bad?.recentOutcomes.length).toBeLessThan(10);
    expect(bad?.consecutiveFailures).toBe(failedListed);
    expect(bad?.consecutiveFailedAttempts).toBe(failedListed); // no retries: one attempt per slot
    // and never more than the run log holds (it only grows after the read)
    const logged = await db().pool.query(
      "SELECT count(*)::int AS n FROM agenda_logs WHERE job_name = 'st-bad' AND event = 'fail' AND meta->>'outcome' = 'failed'",
    );
    expect(logged.rows[0].n).toBeGreaterThanOrEqual(failedListed);
    expect(byName.get("st-legacy")).toMatchObject({ registered: false, configured: null });
  });

  it("counts slots, from the run log alone: a retried slot once, an interrupted slot by its re-run, skips apart", async () => {
    const h = await start([], []);
    // a job row whose Agenda fail_count (attempts, saved apart from the log) disagrees with the log
    await db().pool.query(
      "INSERT INTO agenda_jobs (name, type, repeat_interval, next_run_at, disabled, fail_count, data) VALUES ('st-literal', 'single', '* * * * *', NULL, true, 99, '{}')",
    );
    const rows: Array<[string, string, string | null, Record<string, unknown>]> = [
      // [event, finished at, error, meta] — literal rows, old ones without instanceId or attempt
      [
        "success",
        "10:00:01",
        null,
        { scheduledAt: "2026-01-01T10:00:00.000Z", outcome: "succeeded", attempt: 1 },
      ],
      [
        "retry",
        "10:01:01",
        "s2 try 1",
        { scheduledAt: "2026-01-01T10:01:00.000Z", outcome: "failed", attempt: 1 },
      ],
      [
        "fail",
        "10:01:03",
        "s2 try 2",
        { scheduledAt: "2026-01-01T10:01:00.000Z", outcome: "failed", attempt: 2 },
      ],
      [
        "success",
        "10:02:30",
        null,
        { scheduledAt: "2026-01-01T10:02:00.000Z", outcome: "skipped", detail: "catch-up" },
      ],
      [
        "fail",
        "10:03:05",
        "cut off",
        { scheduledAt: "2026-01-01T10:03:00.000Z", outcome: "interrupted", attempt: 1 },
      ],
      [
        "fail",
        "10:03:09",
        "s4 rerun",
        { scheduledAt: "2026-01-01T10:03:00.000Z", outcome: "failed", rerun: true },
      ],
      ["fail", "10:04:01", "s5 old row", { scheduledAt: "2026-01-01T10:04:00.000Z", outcome: "failed" }],
      // a slot still retrying: an attempt, not a slot yet
      [
        "retry",
        "10:05:01",
        "s6 try 1",
        { scheduledAt: "2026-01-01T10:05:00.000Z", outcome: "failed", attempt: 1 },
      ],
    ];
    for (const [event, at, error, meta] of rows)
      await db().pool.query(
        `INSERT INTO agenda_logs (timestamp, level, event, job_name, message, error, meta)
         VALUES ($1, 'info', $2, 'st-literal', $3, $4, $5::jsonb)`,
        [`2026-01-01T${at}Z`, event, `literal ${event}`, error, JSON.stringify(meta)],
      );
    const status = await h.scheduler.taskStatus("st-literal");
    expect(status).toMatchObject({
      lastOutcome: "failed",
      lastError: "s5 old row",
      // newest first, one per slot: s5, s4 (its re-run, not the interrupted row), s3, s2, s1
      recentOutcomes: ["failed", "failed", "skipped", "failed", "succeeded"],
      // s5, s4 and s2 (the skip in between neither counts nor breaks the streak); not fail_count's 99
      consecutiveFailures: 3,
      // their attempts: 1 (no attempt recorded) + 1 + 2
      consecutiveFailedAttempts: 4,
    });
    const runs = await h.scheduler.runs("st-literal");
    expect(runs.map((run) => [run.outcome, run.attempt, run.rerun])).toEqual([
      ["failed", 1, false],
      ["failed", null, false],
      ["failed", null, true],
      ["interrupted", 1, false],
      ["skipped", null, false],
      ["failed", 2, false],
      ["failed", 1, false],
      ["succeeded", 1, false],
    ]);
    // a hand-edited row: the fields of the wrong type are left out, the rest of the record reads
    const odd = await db().pool.query<{ id: string }>(
      `INSERT INTO agenda_logs (timestamp, level, event, job_name, message, error, meta)
       VALUES ('2026-01-01T09:00:01Z', 'info', 'fail', 'st-literal', 'odd', 'odd error', $1::jsonb) RETURNING id`,
      [
        JSON.stringify({
          scheduledAt: "2026-01-01T09:00:00.000Z",
          outcome: "failed",
          attempt: "first",
          logsDropped: "lots",
          errorStack: 42,
          logs: [{ at: "2026-01-01T09:00:00.500Z", level: "info", msg: "kept" }, "not a line"],
        }),
      ],
    );
    expect(await h.scheduler.runDetail(odd.rows[0]?.id ?? "")).toMatchObject({
      slot: new Date("2026-01-01T09:00:00.000Z"),
      error: "odd error",
      errorStack: null,
      logs: [{ at: "2026-01-01T09:00:00.500Z", level: "info", msg: "kept" }],
      logsDropped: 0,
    });
  });
});

describe("silent-stop detection", () => {
  it("reports a slot that passed without a run (a dead instance's lock, back-dated in SQL) once, and repairs it", async () => {
    const missed: MissedSlotEvent[] = [];
    let runs = 0;
    const h = await start(
      [{ name: "stuck", handler: async () => void runs++ }],
      // a yearly slot: an hourly one within the look-ahead of the start would be claimed ahead by
      // this instance, whose lock the UPDATE below overwrites; it would then run at that slot
      [{ name: "stuck", cron: "0 0 0 1 1 *" }],
      // workers that poll only once a minute: nothing but the detector notices in time
      {
        missedSlotGraceMs: 1000,
        missedSlotCheckMs: 0,
        lockLifetimeMs: 2000,
        minIntervalMs: 60_000,
        processEveryMs: 60_000,
      },
    );
    h.scheduler.on("missed-slot", (event) => missed.push(event));
    // what a dead instance leaves: a slot ten minutes past, locked an hour ago, never renewed
    await db().pool.query(
      "UPDATE agenda_jobs SET next_run_at = date_trunc('second', now()) - interval '10 minutes', locked_at = now() - interval '1 hour' WHERE name = 'stuck'",
    );
    const { rows } = await db().pool.query("SELECT next_run_at FROM agenda_jobs WHERE name = 'stuck'");
    const found = await h.scheduler.checkMissedSlots();
    expect(found).toEqual([
      {
        taskName: "stuck",
        scheduledAt: rows[0].next_run_at,
        reason: expect.stringMatching(/no run started; its lock from .* is no longer renewed by anyone$/),
      },
    ]);
    expect(missed).toHaveLength(1);
    expect(h.logs.find((line) => /^missed slot: "stuck"/.test(String(line.msg)))).toBeDefined();
    const repaired = await pollUntil("the repaired run's record", async () => {
      const history = await h.scheduler.runs("stuck");
      return history.length > 0 ? history : undefined;
    });
    expect(repaired.map((run) => [run.outcome, run.scheduledAt])).toEqual([
      ["succeeded", rows[0].next_run_at],
    ]);
    expect(runs).toBe(1);
    // reported once per slot: a second check finds nothing new
    await sleep(100);
    expect(await h.scheduler.checkMissedSlots()).toEqual([]);
  });

  it("reports an enabled job that lost its next run, and re-times it", async () => {
    const h = await start(
      [{ name: "lost-next", handler: async () => {} }],
      [{ name: "lost-next", cron: "0 0 0 1 1 *" }],
      {
        missedSlotCheckMs: 0,
        antiEntropyMs: 0,
      },
    );
    await db().pool.query("UPDATE agenda_jobs SET next_run_at = NULL WHERE name = 'lost-next'");
    const found = await h.scheduler.checkMissedSlots();
    expect(found).toEqual([
      { taskName: "lost-next", scheduledAt: null, reason: "has no next run (it would never run again)" },
    ]);
    const { rows } = await db().pool.query("SELECT next_run_at FROM agenda_jobs WHERE name = 'lost-next'");
    expect(rows[0].next_run_at).toBeInstanceOf(Date);
  });
});

describe("run history retention", () => {
  it("deletes run-log rows older than the retention, keeps the recent ones", async () => {
    const h = await start(
      [{ name: "ret-task", handler: async () => {} }],
      [{ name: "ret-task", cron: "0 0 0 1 1 *" }],
      {
        runLogRetentionDays: 7,
      },
    );
    await db().pool.query(
      `INSERT INTO agenda_logs (timestamp, level, event, job_name, message)
       SELECT now() - interval '8 days', 'info', 'success', 'ret-task', 'old' FROM generate_series(1, 12)
       UNION ALL SELECT now() - interval '6 days', 'info', 'success', 'ret-task', 'recent' FROM generate_series(1, 3)`,
    );
    expect(await h.scheduler.pruneRunHistory()).toBeGreaterThanOrEqual(12);
    const { rows } = await db().pool.query(
      "SELECT message, count(*)::int AS n FROM agenda_logs WHERE job_name = 'ret-task' GROUP BY 1",
    );
    expect(rows).toEqual([{ message: "recent", n: 3 }]);
  });

  it("keeps each task's latest records by count, beside the age limit, and leaves other tasks alone", async () => {
    const h = await start(
      [
        { name: "keep-a", handler: async () => {} },
        { name: "keep-b", handler: async () => {} },
      ],
      [
        { name: "keep-a", cron: "0 0 0 1 1 *" },
        { name: "keep-b", cron: "0 0 0 1 1 *" },
      ],
      { runLogRetentionDays: 0, runLogKeepPerTask: 5 },
    );
    // keep-a: 12 records a minute apart and a start row of a run that died before the 5th latest;
    // keep-b: 3 records, under the limit
    await db().pool.query(
      `INSERT INTO agenda_logs (timestamp, level, event, job_name, message, meta)
       SELECT now() - make_interval(mins => g), 'info', 'success', 'keep-a', 'record ' || g,
              jsonb_build_object('outcome', 'succeeded') FROM generate_series(1, 12) g
       UNION ALL SELECT now() - interval '30 minutes', 'info', 'start', 'keep-a', 'job started', '{}'::jsonb
       UNION ALL SELECT now() - make_interval(mins => g), 'info', 'success', 'keep-b', 'record ' || g,
              jsonb_build_object('outcome', 'succeeded') FROM generate_series(1, 3) g`,
    );
    expect(await h.scheduler.pruneRunHistory()).toBe(8);
    const { rows } = await db().pool.query(
      "SELECT job_name, array_agg(message ORDER BY timestamp DESC) AS kept FROM agenda_logs WHERE job_name LIKE 'keep-%' GROUP BY 1 ORDER BY 1",
    );
    expect(rows).toEqual([
      { job_name: "keep-a", kept: ["record 1", "record 2", "record 3", "record 4", "record 5"] },
      { job_name: "keep-b", kept: ["record 1", "record 2", "record 3"] },
    ]);
  });
});

import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type AdminServer, createAdminServer } from "../../src/admin/index.js";
import { RUN_LOG_MAX_LINES } from "../../src/engine/runJournal.js";
import { SLOT_INDEX } from "../../src/engine/sql.js";
import { marksOfRow } from "../../src/status/timelineMarks.js";
import { historyPageStatement, type SlotRow } from "../../src/status/timelineSql.js";
import { httpClient } from "../helpers/admin.js";
import { createTestDatabase, type TestDatabase } from "../helpers/database.js";
import { pollUntil, SchedulerHarness } from "../helpers/harness.js";
import { skipAPreLockedSlot } from "../helpers/preLock.js";

/** GET /slots, the paged GET /tasks/:name/runs and GET /runs/:id after real runs on a real PostgreSQL. */

const TOKEN = "timeline-test-token-0123456789";
const TASK_START_ID = "00000000-0000-0000-0000-000000000000";

interface Mark {
  kind: string;
  id: string | null;
  task: string;
  slot: string;
  outcome: string;
  attempt: number | null;
  final: boolean;
  reason: string | null;
  latenessMs: number | null;
  durationMs: number | null;
  count?: number;
  outcomes?: Record<string, number>;
}
interface Page {
  tasks: string[];
  marks: Mark[];
  upcoming: Record<string, string[]>;
  nextCursor: unknown;
}

let db: TestDatabase;
let harness: SchedulerHarness;
let server: AdminServer;
let baseUrl = "";
const transcript: string[] = [];
const call = httpClient(() => baseUrl, transcript);
const get = async <T>(path: string): Promise<T> => {
  const answer = await call("GET", path, { token: TOKEN });
  if (answer.status !== 200) throw new Error(`${path}: ${answer.status} ${answer.text}`);
  return answer.json as T;
};
let releaseHold: () => void = () => {};
let slowCalls = 0;
const flakyAttempts = new Map<string, number>();

beforeAll(async () => {
  db = await createTestDatabase();
  harness = await SchedulerHarness.start(
    db.pool,
    [
      {
        name: "tl-ok",
        handler: async (ctx) => {
          ctx.logger.info({ dsn: "postgres://report:hunter2@db.internal/x" }, "connecting for %s", "report");
          ctx.logger.child({ step: 2 }).warn("password=s3cr3t-value in a message");
          ctx.logger.debug("a debug line");
        },
      },
      {
        name: "tl-chatty",
        handler: async (ctx) => {
          for (let line = 0; line < RUN_LOG_MAX_LINES + 50; line++) ctx.logger.info(`line ${line}`);
        },
      },
      {
        name: "tl-flaky",
        retry: { maxRetries: 1, delayMs: 100 },
        handler: async (ctx) => {
          const key = ctx.scheduledAt.toISOString();
          flakyAttempts.set(key, (flakyAttempts.get(key) ?? 0) + 1);
          if (ctx.attempt === 1) throw new Error("first attempt fails");
        },
      },
      {
        name: "tl-broken",
        handler: async () => {
          throw new Error("upstream answered 503");
        },
      },
      {
        name: "tl-slow",
        handler: async () => {
          slowCalls += 1;
          // the first run outlasts two slots: those slots are missed, the next run is late
          if (slowCalls === 1) await new Promise((resolve) => setTimeout(resolve, 5_000));
        },
      },
      {
        name: "tl-hold",
        handler: () =>
          new Promise<void>((resolve) => {
            releaseHold = resolve;
          }),
      },
      { name: "tl-skip", handler: async () => {} },
    ],
    [
      { name: "tl-ok", cron: "* * * * * *" },
      { name: "tl-chatty", cron: "*/2 * * * * *" },
      { name: "tl-flaky", cron: "*/2 * * * * *" },
      { name: "tl-broken", cron: "*/2 * * * * *" },
      { name: "tl-slow", cron: "*/2 * * * * *", overlap: "queueOne" },
      { name: "tl-hold", cron: "0 0 0 1 1 *" },
      { name: "tl-skip", cron: "*/5 * * * * *" },
    ],
    // a grace above a loaded machine's start delay: the slot queued behind tl-slow's run stays on time
    { missedSlotGraceMs: 5_000 },
  );
  server = createAdminServer({
    scheduler: harness.scheduler,
    port: 0,
    token: TOKEN,
    logger: harness.logs.logger,
  });
  ({ url: baseUrl } = await server.listen());
  // a skip: the task is disabled after Agenda pre-locked its slot
  await skipAPreLockedSlot(db.pool, harness.scheduler, "tl-skip");
  await db.pool.query("UPDATE agenda_jobs SET disabled = false WHERE name = 'tl-skip'");
  await harness.scheduler.runNow("tl-hold");
  await pollUntil(
    "tl-hold to be running",
    async () => (await harness.scheduler.taskStatus("tl-hold"))?.running,
  );
  await pollUntil(
    "tl-slow's late second run",
    async () => (await harness.scheduler.runs("tl-slow", 5)).length >= 2,
  );
  await pollUntil("tl-flaky's retried slot", async () =>
    (await harness.scheduler.runs("tl-flaky", 10)).some((run) => run.attempt === 2),
  );
  await pollUntil("runs of tl-ok, tl-chatty and tl-broken", async () => {
    const counts = await Promise.all(
      ["tl-ok", "tl-chatty", "tl-broken"].map(async (name) => (await harness.scheduler.runs(name, 5)).length),
    );
    return counts.every((count) => count >= 3);
  });
}, 120_000);

afterAll(async () => {
  releaseHold();
  await server?.close();
  await harness?.stop();
  await db?.drop();
});

const ALL = "tl-broken,tl-chatty,tl-flaky,tl-hold,tl-ok,tl-skip,tl-slow";

describe("GET /slots", () => {
  it("marks every slot of many tasks in one call: succeeded, failed and retried, skipped with its reason, running, missed", async () => {
    const page = await get<Page>(`/slots?tasks=${ALL}`);
    expect(page.tasks).toEqual(ALL.split(","));
    expect(page.nextCursor).toBeNull();
    const of = (task: string, outcome: string) =>
      page.marks.filter((mark) => mark.task === task && mark.outcome === outcome);
    expect(of("tl-ok", "succeeded").length).toBeGreaterThanOrEqual(3);
    expect(of("tl-broken", "failed")[0]?.reason).toBe("upstream answered 503");
    const retried = of("tl-flaky", "failed").find((mark) => !mark.final);
    expect(retried).toMatchObject({ attempt: 1, final: false });
    expect(
      page.marks.find(
        (mark) => mark.task === "tl-flaky" && mark.slot === retried?.slot && mark.outcome === "succeeded",
      ),
    ).toMatchObject({ attempt: 2, final: true });
    // (on a loaded machine a run can also outlast its 5 s schedule: overlap skips beside it)
    expect(of("tl-skip", "skipped").map((mark) => mark.reason)).toContain(
      "the task was disabled after this slot was locked",
    );
    expect(of("tl-hold", "running")).toHaveLength(1);
    expect(of("tl-hold", "running")[0]?.id).toMatch(/^[0-9a-f-]{36}$/);
    // tl-slow's first run took 5 s of a 2 s schedule (overlap: queueOne): the newest slot it covered
    // ran late, the older ones are skipped with the overlap reason (missed marks: timelineBuckets.test.ts)
    const missed = of("tl-slow", "skipped");
    expect(missed.length).toBeGreaterThanOrEqual(1);
    expect(missed[0]?.reason).toMatch(/overlap is queueOne/);
    const slowRuns = of("tl-slow", "succeeded");
    expect(slowRuns[0]?.durationMs).toBeGreaterThanOrEqual(4_900);
    expect(Math.max(...slowRuns.map((mark) => mark.latenessMs ?? 0))).toBeGreaterThan(1_000);
    for (const mark of missed) expect(slowRuns.map((run) => run.slot)).not.toContain(mark.slot);
    expect(page.upcoming["tl-ok"]).toHaveLength(3);
  });

  it("pages with a keyset cursor to the same run marks as one call", async () => {
    const to = new Date().toISOString();
    const range = `from=${new Date(Date.now() - 3_600_000).toISOString()}&to=${to}`;
    const whole = await get<Page>(`/slots?${range}`);
    const ids = (marks: Mark[]) =>
      marks.filter((mark) => mark.id).map((mark) => `${mark.id}:${mark.outcome}`);
    const paged: Mark[] = [];
    let cursor: string | undefined;
    let pages = 0;
    do {
      const page = await get<Page & { nextCursor: string | null }>(
        `/slots?${range}&limit=2${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ""}`,
      );
      paged.push(...page.marks);
      cursor = page.nextCursor ?? undefined;
      pages += 1;
    } while (cursor && pages < 500);
    expect(pages).toBeGreaterThan(3);
    // the runs go on while the pages are read: a slot of the last seconds before `to`, or running
    // at the first call, may have started or ended since; those are left out of both lists
    const runningSlots = new Set(
      whole.marks.filter((mark) => mark.outcome === "running").map((mark) => `${mark.task}@${mark.slot}`),
    );
    const settledBefore = Date.parse(to) - 5_000;
    const settled = (marks: Mark[]) =>
      marks.filter(
        (mark) =>
          !runningSlots.has(`${mark.task}@${mark.slot}`) && Date.parse(String(mark.slot)) < settledBefore,
      );
    expect(ids(settled(whole.marks)).length).toBeGreaterThan(0);
    expect(ids(settled(paged)).filter((id) => !id.endsWith(":running"))).toEqual(
      ids(settled(whole.marks)).filter((id) => !id.endsWith(":running")),
    );
    // no slot with a run is also called missed
    const slotsWithRuns = new Set(paged.filter((mark) => mark.id).map((mark) => `${mark.task}@${mark.slot}`));
    expect(
      paged.filter((mark) => mark.outcome === "missed" && slotsWithRuns.has(`${mark.task}@${mark.slot}`)),
    ).toEqual([]);
  });

  it("sums marks per bucket when asked for a resolution", async () => {
    const page = await get<Page>(
      `/slots?tasks=tl-ok&bucketMs=3600000&from=${new Date(Date.now() - 3_600_000).toISOString()}`,
    );
    const buckets = page.marks.filter((mark) => mark.kind === "bucket");
    expect(buckets.length).toBeGreaterThanOrEqual(1);
    expect(buckets.reduce((sum, mark) => sum + (mark.count ?? 0), 0)).toBeGreaterThanOrEqual(3);
    expect(buckets[0]?.outcomes?.succeeded).toBeGreaterThanOrEqual(1);
  });

  it("refuses bad input with the parameter, the value's problem and the fix", async () => {
    const bad = async (path: string, status: number, pattern: RegExp) => {
      const answer = await call("GET", path, { token: TOKEN });
      expect(answer.status, path).toBe(status);
      expect((answer.json as { error: string }).error, path).toMatch(pattern);
    };
    await bad("/slots?from=yesterday", 400, /query\.from: from must be an ISO 8601 date/);
    await bad("/slots?from=2030-01-02T00:00:00Z&to=2030-01-01T00:00:00Z", 400, /from must be before to/);
    await bad("/slots?from=2030-01-01T00:00:00Z&to=2030-03-01T00:00:00Z", 400, /at most 31 days/);
    await bad("/slots?limit=0", 400, /query\.limit/);
    await bad("/slots?cursor=garbage", 400, /cursor: not a cursor this endpoint gave/);
    await bad("/slots?tasks=no-such-task", 404, /no task named "no-such-task"/);
    await bad("/slots?color=red", 400, /unexpected "color"/);
    await bad("/runs/not-a-uuid", 400, /a run id is a UUID/);
    await bad("/runs/00000000-0000-4000-8000-000000000000", 404, /no run with id/);
    await bad(
      "/tasks/tl-ok/runs?outcome=exploded",
      400,
      /outcome must be succeeded, failed, skipped, interrupted or lock-lost/,
    );
    await bad("/tasks/tl-ok/runs?trigger=cron", 400, /trigger must be schedule, manual, rerun or backfill/);
  });

  it("reads from its index", async () => {
    // enough rows of another task that a sequential scan would lose
    await db.pool.query(
      `INSERT INTO agenda_logs (timestamp, level, event, job_name, message, meta)
       SELECT now() - make_interval(secs => g), 'info', 'success', 'bulk-' || (g % 200), 'x',
              jsonb_build_object('scheduledAt', to_char((now() - make_interval(secs => g)) AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'), 'outcome', 'succeeded')
         FROM generate_series(1, 60000) g`,
    );
    await db.pool.query("ANALYZE agenda_logs");
    const plan = await db.pool.query(
      `EXPLAIN SELECT id FROM agenda_logs WHERE job_name = 'tl-ok' AND event IN ('success', 'fail', 'retry')
         AND (meta->>'scheduledAt') >= '2020-01-01' AND (meta->>'scheduledAt') < '2100-01-01' AND meta ? 'outcome'
         ORDER BY (meta->>'scheduledAt'), id LIMIT 100`,
    );
    const text = plan.rows.map((row) => row["QUERY PLAN"]).join("\n");
    expect(text).toMatch(await slotIndexes());
  });

  it("the history reads newest slot first from the same index (GET /tasks/:name/runs)", async () => {
    // one task with a long history: the plan walks the slot index backward and stops at the page's end
    await db.pool.query(
      `INSERT INTO agenda_logs (timestamp, level, event, job_name, message, meta)
       SELECT now() - make_interval(secs => g), 'info', 'success', 'long-history', 'x',
              jsonb_build_object('scheduledAt', to_char((now() - make_interval(secs => g + 1)) AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'), 'outcome', 'succeeded')
         FROM generate_series(1, 50000) g`,
    );
    await db.pool.query("ANALYZE agenda_logs");
    for (const before of [
      undefined,
      { slot: new Date().toISOString(), timestamp: new Date(), id: TASK_START_ID },
    ]) {
      const { text, values } = historyPageStatement({ task: "long-history", limit: 21, before });
      const plan = (await db.pool.query(`EXPLAIN ${text}`, values)).rows
        .map((row) => row["QUERY PLAN"])
        .join("\n");
      expect(plan).toMatch(new RegExp(`Index Scan Backward using (${(await slotIndexes()).source})`));
      // the few records of one slot are sorted after it, not the task's whole history
      expect(plan, plan).not.toMatch(/^\s*(->\s*)?Sort\s+\(cost/m);
    }
  });
});

describe("GET /tasks/:name/runs", () => {
  it("pages through every run to the oldest, newest first", async () => {
    const all = await get<Array<{ id: string }>>("/tasks/tl-ok/runs?limit=500");
    const seen: string[] = [];
    let cursor: string | null = null;
    let pages = 0;
    do {
      const answer = await call(
        "GET",
        `/tasks/tl-ok/runs?limit=2&to=${encodeURIComponent(new Date(Date.now() + 60_000).toISOString())}${cursor ? `&cursor=${cursor}` : ""}`,
        { token: TOKEN },
      );
      seen.push(...(answer.json as Array<{ id: string }>).map((run) => run.id));
      cursor = answer.headers.get("x-next-cursor");
      pages += 1;
    } while (cursor && pages < 1_000);
    // runs keep coming: every run of the first listing is in the pages, in the same order
    const oldest = all.at(-1)?.id;
    expect(seen).toContain(oldest);
    expect(seen.slice(seen.indexOf(all[0]?.id ?? ""))).toEqual(
      expect.arrayContaining(all.map((run) => run.id)),
    );
    expect(seen.at(-1)).toBe(oldest);
  });

  it("filters by outcome, trigger and date range", async () => {
    const failed = await get<Array<{ outcome: string; attempt: number }>>(
      "/tasks/tl-flaky/runs?outcome=failed",
    );
    expect(failed.length).toBeGreaterThanOrEqual(1);
    expect(failed.every((run) => run.outcome === "failed" && run.attempt === 1)).toBe(true);
    expect(await get<unknown[]>("/tasks/tl-ok/runs?trigger=manual")).toEqual([]);
    const future = new Date(Date.now() + 3_600_000).toISOString();
    expect(await get<unknown[]>(`/tasks/tl-ok/runs?from=${future}`)).toEqual([]);
    const skipped = await get<Array<{ detail: string }>>("/tasks/tl-skip/runs?outcome=skipped,failed");
    expect(skipped[0]?.detail).toMatch(/disabled after this slot was locked/);
  });
});

describe("GET /runs/:id", () => {
  it("a failed run: slot, times, instance and the error with its stack", async () => {
    const [run] = await get<Array<{ id: string }>>("/tasks/tl-broken/runs?limit=1");
    const detail = await get<Record<string, unknown>>(`/runs/${run?.id}`);
    expect(detail).toMatchObject({
      task: "tl-broken",
      outcome: "failed",
      error: "upstream answered 503",
      attempt: 1,
    });
    expect(detail.errorStack).toMatch(/^Error: upstream answered 503\n\s+at /);
    expect(detail.instanceId).toBe(harness.scheduler.settings.instanceId);
    for (const key of ["slot", "startedAt", "finishedAt", "durationMs", "trigger"])
      expect(detail[key]).not.toBeNull();
  });

  it("keeps the handler's ctx.logger lines, redacted, at the levels logged; bounded with a count of the rest", async () => {
    const [run] = await get<Array<{ id: string }>>("/tasks/tl-ok/runs?limit=1");
    const answer = await call("GET", `/runs/${run?.id}`, { token: TOKEN });
    const detail = answer.json as { logs: Array<{ level: string; msg: string; data?: string }> };
    expect(detail.logs.map((line) => [line.level, line.msg])).toEqual([
      ["info", "connecting for report"],
      ["warn", "password=*** in a message"],
      ["debug", "a debug line"],
    ]);
    expect(detail.logs[0]?.data).toContain("postgres://report:***@db.internal/x");
    // stored redacted, not only answered redacted
    const stored = await db.pool.query("SELECT meta::text AS meta FROM agenda_logs WHERE id = $1", [run?.id]);
    expect(stored.rows[0].meta).not.toMatch(/hunter2|s3cr3t/);
    expect(answer.text).not.toMatch(/hunter2|s3cr3t/);

    const [chatty] = await get<Array<{ id: string }>>("/tasks/tl-chatty/runs?limit=1");
    const bounded = await get<{ logs: unknown[]; logsDropped: number }>(`/runs/${chatty?.id}`);
    expect(bounded.logs).toHaveLength(RUN_LOG_MAX_LINES);
    expect(bounded.logsDropped).toBe(50);
  });

  it("a run in progress answers from its start", async () => {
    const page = await get<Page>("/slots?tasks=tl-hold");
    const running = page.marks.find((mark) => mark.outcome === "running");
    const detail = await get<Record<string, unknown>>(`/runs/${running?.id}`);
    expect(detail).toMatchObject({ task: "tl-hold", outcome: "running", finishedAt: null });
  });
});

describe("marks of a re-run", () => {
  it("a re-run's first attempt also marks the run it repeats as interrupted", () => {
    const row: SlotRow = {
      id: "00000000-0000-4000-8000-000000000001",
      job_name: "t",
      event: "success",
      timestamp: new Date("2030-01-01T00:00:30Z"),
      duration: 100,
      error: null,
      agenda_name: null,
      slot: "2030-01-01T00:00:00.000Z",
      outcome: "succeeded",
      started_at: "2030-01-01T00:00:29.900Z",
      finished_at: "2030-01-01T00:00:30.000Z",
      attempt: "1",
      trigger: null,
      requested_by: null,
      rerun: true,
      rerun_of: { startedAt: "2030-01-01T00:00:00.100Z", instanceId: "host:1:ab" },
      instance_id: "host:2:cd",
      detail: null,
    };
    const [cut, rerun] = marksOfRow(row);
    expect(cut).toMatchObject({ outcome: "interrupted", id: null, instanceId: "host:1:ab", latenessMs: 100 });
    expect(rerun).toMatchObject({ outcome: "succeeded", rerunOf: { instanceId: "host:1:ab" } });
    expect(marksOfRow({ ...row, attempt: "2" })).toHaveLength(1);
  });
});

/** The slot index and its partitions' (the run log is partitioned by time: src/engine/sql/runLogPartitions.ts), as one pattern. */
async function slotIndexes(): Promise<RegExp> {
  const { rows } = await db.pool.query<{ name: string }>(
    "SELECT c.relname AS name FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = $1::regclass",
    [SLOT_INDEX],
  );
  return new RegExp([SLOT_INDEX, ...rows.map((row) => row.name)].join("|"));
}

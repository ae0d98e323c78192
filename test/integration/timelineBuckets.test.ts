import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { migrateSchema } from "../../src/engine/schema.js";
import { coverRunLog } from "../../src/engine/sql/runLogPartitions.js";
import { SLOT_INDEX } from "../../src/engine/sql.js";
import {
  type BucketMark,
  type MarkOutcome,
  type RunMark,
  readTimeline,
  type TimelineCursor,
  type TimelineMark,
} from "../../src/status/timeline.js";
import { slotBucketsStatement } from "../../src/status/timelineSql.js";
import { createTestDatabase, type TestDatabase } from "../helpers/database.js";

/**
 * The bucketed timeline (summed in SQL) against the exact one (every mark, summed here) on a small
 * data set written as the engine writes it: failures, a retried slot, a skip, a re-run of a cut-off
 * run, a manual run off the schedule, missed slots, a run in progress, a disabled task.
 */

const T0 = Date.parse("2030-01-01T00:00:00.000Z");
const MIN = 60_000;
const NOW = new Date(T0 + 30 * MIN + 10_000);
const FROM = new Date(T0);
const TO = new Date(T0 + 40 * MIN);

let db: TestDatabase;

interface SeedRecord {
  task: string;
  slot: number;
  event?: "success" | "fail" | "retry";
  outcome?: "succeeded" | "failed" | "skipped";
  attempt?: number;
  lateMs?: number;
  duration?: number;
  rerunOf?: { startedAt: string; instanceId: string };
  trigger?: "manual";
}

async function insert(record: SeedRecord): Promise<void> {
  const started = record.slot + (record.lateMs ?? 500);
  const duration = record.duration ?? 200;
  const iso = (ms: number) => new Date(ms).toISOString();
  const meta: { [key: string]: unknown } = {
    scheduledAt: iso(record.slot),
    outcome: record.outcome ?? "succeeded",
    attempt: record.attempt ?? 1,
    startedAt: iso(started),
    finishedAt: iso(started + duration),
    instanceId: "test:1",
  };
  if (record.rerunOf) Object.assign(meta, { rerun: true, rerunOf: record.rerunOf });
  if (record.trigger) meta.trigger = record.trigger;
  await db.pool.query(
    `INSERT INTO agenda_logs (timestamp, level, event, job_name, message, duration, error, meta)
     VALUES ($1, 'info', $2, $3, 'x', $4, $5, $6)`,
    [
      new Date(started + duration),
      record.event ?? (record.outcome === "failed" ? "fail" : "success"),
      record.task,
      duration,
      record.outcome === "failed" ? "boom" : null,
      meta,
    ],
  );
}

beforeAll(async () => {
  db = await createTestDatabase();
  await migrateSchema(db.pool);
  // the run log's partitions for these times (rows inserted here directly: src/engine/sql/runLogPartitions.ts)
  await coverRunLog(db.pool, 24, new Date(T0 - 86_400_000), new Date(T0 + 86_400_000));
  await db.pool.query(
    `INSERT INTO agenda_jobs (name, type, repeat_interval, repeat_timezone, next_run_at, created_at, last_run_at, last_finished_at, locked_at, disabled)
     VALUES ('b-minute', 'single', '* * * * *', 'UTC', $1, $2, $3, $4, $3, false),
            ('b-five', 'single', '*/5 * * * *', 'UTC', $1, $2, $4, $4, NULL, false),
            ('b-off', 'single', '* * * * *', 'UTC', NULL, $2, $4, $4, NULL, true)`,
    [
      new Date(T0 + 31 * MIN),
      new Date(T0 - 3_600_000),
      new Date(T0 + 29 * MIN + 400),
      new Date(T0 + 28 * MIN + 900),
    ],
  );
  for (let minute = 0; minute < 29; minute++) {
    const slot = T0 + minute * MIN;
    if ([5, 6, 17].includes(minute)) continue; // missed
    if (minute === 3) await insert({ task: "b-minute", slot, outcome: "failed", duration: 900 });
    else if (minute === 8) {
      await insert({ task: "b-minute", slot, event: "retry", outcome: "failed", attempt: 1 });
      await insert({ task: "b-minute", slot, attempt: 2, lateMs: 4_000 });
    } else if (minute === 12) await insert({ task: "b-minute", slot, outcome: "skipped", duration: 0 });
    else if (minute === 20)
      await insert({
        task: "b-minute",
        slot,
        lateMs: 20_000,
        rerunOf: { startedAt: new Date(slot + 300).toISOString(), instanceId: "test:0" },
      });
    else await insert({ task: "b-minute", slot, lateMs: 100 + minute * 10, duration: 100 + minute });
  }
  await insert({ task: "b-minute", slot: T0 + 25 * MIN + 30_000, trigger: "manual", duration: 5_000 });
  // the slot of minute 29 is running: a start row, the job locked
  await db.pool.query(
    `INSERT INTO agenda_logs (timestamp, level, event, job_name, message, meta)
     VALUES ($1, 'info', 'start', 'b-minute', 'x', $2)`,
    [
      new Date(T0 + 29 * MIN + 400),
      { scheduledAt: new Date(T0 + 29 * MIN).toISOString(), instanceId: "test:1" },
    ],
  );
  for (const minute of [0, 5, 15, 25]) {
    await insert({
      task: "b-five",
      slot: T0 + minute * MIN,
      outcome: minute === 15 ? "failed" : "succeeded",
    });
  }
  for (const minute of [0, 1, 2]) await insert({ task: "b-off", slot: T0 + minute * MIN });
});

afterAll(async () => {
  await db?.drop();
});

const options = () => ({ pool: db.pool, namespace: "default", missedSlotGraceMs: 60_000, now: () => NOW });

async function allMarks(bucketMs: number, limit: number): Promise<{ marks: TimelineMark[]; pages: number }> {
  const marks: TimelineMark[] = [];
  let cursor: TimelineCursor | undefined;
  let pages = 0;
  do {
    const page = await readTimeline(options(), { from: FROM, to: TO, cursor, limit, bucketMs });
    marks.push(...page.marks);
    cursor = page.nextCursor ?? undefined;
    pages += 1;
  } while (cursor && pages < 1_000);
  return { marks, pages };
}

interface Sum {
  outcomes: { [outcome: string]: number };
  maxLatenessMs: number | null;
  maxDurationMs: number | null;
}

/** Per (task, bucket): the outcomes counted and the largest lateness and duration (a bucket cut by a page adds up). */
function sums(marks: TimelineMark[], bucketMs: number): Map<string, Sum> {
  const out = new Map<string, Sum>();
  const max = (a: number | null, b: number | null) => (b === null ? a : Math.max(a ?? 0, b));
  for (const mark of marks) {
    const index = Math.floor((mark.slot.getTime() - FROM.getTime()) / bucketMs);
    const key = `${mark.task}#${index}`;
    const sum = out.get(key) ?? { outcomes: {}, maxLatenessMs: null, maxDurationMs: null };
    out.set(key, sum);
    const counts: Partial<Record<MarkOutcome, number>> =
      mark.kind === "bucket" ? mark.outcomes : { [mark.outcome]: 1 };
    for (const [outcome, count] of Object.entries(counts))
      sum.outcomes[outcome] = (sum.outcomes[outcome] ?? 0) + (count ?? 0);
    sum.maxLatenessMs = max(sum.maxLatenessMs, mark.kind === "bucket" ? mark.maxLatenessMs : mark.latenessMs);
    sum.maxDurationMs = max(sum.maxDurationMs, mark.kind === "bucket" ? mark.maxDurationMs : mark.durationMs);
  }
  return out;
}

describe("GET /slots with bucketMs, summed in SQL", () => {
  it("the exact answer holds every kind of mark", async () => {
    const { marks } = await allMarks(0, 50_000);
    const count = (task: string, outcome: string) =>
      marks.filter((mark) => mark.task === task && mark.outcome === outcome).length;
    expect(count("b-minute", "missed")).toBe(3);
    expect(count("b-minute", "failed")).toBe(2);
    expect(count("b-minute", "skipped")).toBe(1);
    expect(count("b-minute", "interrupted")).toBe(1);
    expect(count("b-minute", "running")).toBe(1);
    expect(count("b-five", "missed")).toBe(2); // minutes 10 and 20
    expect(count("b-off", "succeeded")).toBe(3);
  });

  for (const bucketMs of [90_000, 300_000, 420_000, 3_600_000]) {
    for (const limit of [50_000, 3, 1]) {
      it(`agrees with the exact answer's counts: bucketMs=${bucketMs}, limit=${limit}`, async () => {
        const exact = (await allMarks(0, 50_000)).marks as RunMark[];
        const { marks, pages } = await allMarks(bucketMs, limit);
        if (limit === 1) expect(pages).toBeGreaterThan(2);
        expect(sums(marks, bucketMs)).toEqual(sums(exact, bucketMs));
        // a bucket of one mark is that mark, as the exact answer has it
        for (const mark of marks.filter((mark): mark is RunMark => mark.kind === "run")) {
          expect(exact).toContainEqual(mark);
        }
        // a bucket's id is a run in it of the most severe outcome a run with an id has there
        const severity = ["failed", "interrupted", "missed", "running", "skipped", "succeeded"];
        const rank = (id: string | null) =>
          severity.indexOf(exact.find((run) => run.id === id)?.outcome ?? "none") >>> 0;
        // a bucket cut by a page boundary: its pieces' ids, the most severe kept (as the dashboard merges)
        const buckets = new Map<string, BucketMark>();
        for (const mark of marks.filter((mark): mark is BucketMark => mark.kind === "bucket")) {
          const key = `${mark.task}#${mark.slot.getTime()}`;
          const other = buckets.get(key);
          buckets.set(key, other && rank(other.id) <= rank(mark.id) ? other : mark);
        }
        for (const mark of buckets.values()) {
          const inBucket = exact.filter(
            (run) =>
              run.task === mark.task && run.id !== null && run.slot >= mark.slot && run.slot < mark.until,
          );
          const worst = severity.find((outcome) => inBucket.some((run) => run.outcome === outcome));
          const named = inBucket.find((run) => run.id === mark.id);
          expect(named?.outcome ?? null, `${mark.task} ${mark.slot.toISOString()}`).toBe(worst ?? null);
        }
      });
    }
  }

  it("reads one row per bucket", async () => {
    const page = await readTimeline(options(), { from: FROM, to: TO, limit: 2, bucketMs: 3_600_000 });
    // b-five's 4 records and b-minute's 28 are one bucket each: the page of 2 rows covers both
    expect(page.tasks).toEqual(["b-five", "b-minute"]);
  });

  it("sums from the slot index", async () => {
    // enough rows of other tasks that a sequential scan would lose
    await db.pool.query(
      `INSERT INTO agenda_logs (timestamp, level, event, job_name, message, meta)
       SELECT $1::timestamptz + make_interval(secs => g), 'info', 'success', 'bulk-' || (g % 200), 'x',
              jsonb_build_object('scheduledAt', to_char(($1::timestamptz + make_interval(secs => g)) AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'), 'outcome', 'succeeded')
         FROM generate_series(1, 60000) g`,
      [FROM],
    );
    await db.pool.query("ANALYZE agenda_logs");
    const { text, values } = slotBucketsStatement({
      task: "b-minute",
      from: FROM.toISOString(),
      to: TO.toISOString(),
      bucketMs: 300_000,
      after: { slot: FROM.toISOString(), id: "00000000-0000-0000-0000-000000000000" },
      limit: 100,
      withSlots: true,
    });
    const plan = await db.pool.query(`EXPLAIN ${text}`, values);
    // the slot index or its partitions' (the run log is partitioned by time)
    const partitions = await db.pool.query<{ name: string }>(
      "SELECT c.relname AS name FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = $1::regclass",
      [SLOT_INDEX],
    );
    expect(plan.rows.map((row) => row["QUERY PLAN"]).join("\n")).toMatch(
      new RegExp([SLOT_INDEX, ...partitions.rows.map((row) => row.name)].join("|")),
    );
  });
});

describe("missed slots follow the schedule's one enumeration (src/core/policies/schedule.ts)", () => {
  beforeAll(async () => {
    // no record at all: every slot past its grace is missed, from the job's creation on
    await db.pool.query(
      `INSERT INTO agenda_jobs (name, type, repeat_interval, repeat_timezone, next_run_at, created_at, disabled)
       VALUES ('z-office-hours', 'single', '*/5 9-17 * * *', 'UTC', $1, $2, false),
              ('z-lord-howe', 'single', '15 2 * * *', 'Australia/Lord_Howe', $1, $2, false)`,
      [new Date(T0 + 31 * MIN), new Date(Date.parse("2026-01-01T00:00:00Z"))],
    );
  });

  const missed = async (task: string, from: string, to: string) => {
    const page = await readTimeline(options(), {
      from: new Date(from),
      to: new Date(to),
      tasks: [task],
      limit: 100,
    });
    expect(page.missedUnchecked).toEqual([]);
    return page.marks.filter((mark) => mark.outcome === "missed").map((mark) => mark.slot.toISOString());
  };

  it("only in the hours a cron names: not every 5 minutes of the night after the first 8 slots", async () => {
    const slots = await missed("z-office-hours", "2026-06-01T00:00:00.000Z", "2026-06-02T00:00:00.000Z");
    expect(slots).toHaveLength(9 * 12);
    expect([slots[0], slots.at(-1)]).toEqual(["2026-06-01T09:00:00.000Z", "2026-06-01T17:55:00.000Z"]);
  });

  it("a fixed time a spring-forward skips is missed at its shifted instant (Lord Howe, 02:15 -> 02:45)", async () => {
    // 4 Oct 2026 02:00 +10:30 -> 02:30 +11: the 02:15 of that day is 02:45 +11 (15:45Z on the 3rd)
    expect(await missed("z-lord-howe", "2026-10-03T00:00:00.000Z", "2026-10-05T00:00:00.000Z")).toEqual([
      "2026-10-03T15:45:00.000Z",
      "2026-10-04T15:15:00.000Z",
    ]);
  });
});

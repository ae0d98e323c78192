import { randomUUID } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { StatementBatch } from "../../src/db/statementBatch.js";
import { AgendaEngine } from "../../src/engine/agendaEngine.js";
import {
  insertRunLogRows,
  type RunLogInsert,
  selectLastStart,
  writeRunLogRows,
} from "../../src/engine/sql/runLog.js";
import { createTestDatabase, type TestDatabase } from "../helpers/database.js";
import { LogCapture } from "../helpers/logs.js";

/** Run-log rows written in batches against a real PostgreSQL: one statement for many rows, a bad row alone. */

let db: TestDatabase;

beforeAll(async () => {
  db = await createTestDatabase();
  const logs = new LogCapture();
  const engine = new AgendaEngine({
    pool: db.pool,
    instanceId: "setup",
    processEveryMs: 1000,
    lockLifetimeMs: 10_000,
    logger: logs.logger,
  });
  await engine.prepare(); // the schema
});

afterAll(async () => {
  await db?.drop();
});

const row = (jobName: string, index: number): RunLogInsert => ({
  timestamp: new Date(Date.UTC(2026, 11, 1, 0, 0, index)),
  level: "info",
  event: "success",
  jobId: `job-${index}`,
  jobName,
  message: "job succeeded",
  duration: 12.4,
  agendaName: "instance-a",
  meta: { scheduledAt: new Date(Date.UTC(2026, 11, 1)).toISOString(), outcome: "succeeded" },
});

describe("StatementBatch of run-log rows", () => {
  it("writes the rows asked for together in one statement, every column as Agenda's logger writes it", async () => {
    const statements: number[] = [];
    const batch = new StatementBatch<RunLogInsert, void>(async (rows) => {
      statements.push(rows.length);
      await insertRunLogRows(db.pool, rows);
      return rows.map(() => undefined);
    });
    await Promise.all(Array.from({ length: 50 }, (_, index) => batch.submit(row("batched", index))));
    expect(statements).toEqual([50]);
    const { rows } = await db.pool.query(
      "SELECT level, event, job_id, job_name, message, duration, error, agenda_name, meta FROM agenda_logs WHERE job_name = 'batched' ORDER BY timestamp",
    );
    expect(rows).toHaveLength(50);
    expect(rows[7]).toEqual({
      level: "info",
      event: "success",
      job_id: "job-7",
      job_name: "batched",
      message: "job succeeded",
      duration: 12,
      error: null,
      agenda_name: "instance-a",
      meta: { scheduledAt: "2026-12-01T00:00:00.000Z", outcome: "succeeded" },
    });
  });

  it("a row the table refuses fails alone; the others of its batch are written", async () => {
    const batch = new StatementBatch<RunLogInsert, void>(async (rows) => {
      await insertRunLogRows(db.pool, rows);
      return rows.map(() => undefined);
    });
    const results = await Promise.allSettled([
      batch.submit(row("partly", 1)),
      batch.submit({ ...row("partly", 2), level: "x".repeat(20) }), // level is VARCHAR(10)
      batch.submit(row("partly", 3)),
    ]);
    expect(results.map((result) => result.status)).toEqual(["fulfilled", "rejected", "fulfilled"]);
    const { rows } = await db.pool.query(
      "SELECT job_id FROM agenda_logs WHERE job_name = 'partly' ORDER BY job_id",
    );
    expect(rows.map((each) => each.job_id)).toEqual(["job-1", "job-3"]);
  });

  // what PostgreSQL cannot take in a task's text: NUL (no text holds one) and a lone surrogate (a
  // message cut inside an emoji; JSON input refuses its escape)
  it.each([
    {
      what: "a NUL",
      job: "nul",
      error: "bad\u0000byte",
      detail: "a\u0000b",
      stored: ["bad\uFFFDbyte", "a\uFFFDb"],
    },
    {
      what: "a lone surrogate",
      job: "surrogate",
      error: "cut \ud83d",
      detail: "\ude00",
      stored: ["cut \uFFFD", "\uFFFD"],
    },
  ])(
    "$what in a task's error is written as U+FFFD and fails nothing",
    async ({ job, error, detail, stored }) => {
      await insertRunLogRows(db.pool, [
        { ...row(job, 1), event: "fail", error, meta: { scheduledAt: "x", detail } },
        row(job, 2),
      ]);
      const { rows } = await db.pool.query(
        "SELECT job_id, error, meta->>'detail' AS detail FROM agenda_logs WHERE job_name = $1 ORDER BY job_id",
        [job],
      );
      expect(rows).toEqual([
        { job_id: "job-1", error: stored[0], detail: stored[1] },
        { job_id: "job-2", error: null, detail: null },
      ]);
    },
  );

  it("a run's start waits among the runs in progress; its record takes its id and ends it (one log row per run)", async () => {
    const runId = randomUUID();
    const start: RunLogInsert = {
      ...row("replaced", 1),
      id: runId,
      event: "start",
      message: "job started",
      meta: { scheduledAt: "2026-12-01T00:00:00.000Z" },
    };
    await writeRunLogRows(db.pool, [start]);
    const inLog = async () =>
      (
        await db.pool.query(
          "SELECT id, event, job_id, error FROM agenda_logs WHERE job_name = 'replaced' ORDER BY job_id",
        )
      ).rows;
    const inProgress = async () =>
      (await db.pool.query("SELECT id, job_id FROM cronwarden_run_starts WHERE job_name = 'replaced'")).rows;
    expect(await inLog()).toEqual([]);
    expect(await inProgress()).toEqual([{ id: runId, job_id: "job-1" }]);
    await writeRunLogRows(db.pool, [{ ...row("replaced", 1), replaces: runId }]);
    expect(await inLog()).toEqual([{ id: runId, event: "success", job_id: "job-1", error: null }]);
    expect(await inProgress()).toEqual([]);
    // a start written after its record (retried through an outage) is left out
    await writeRunLogRows(db.pool, [start]);
    expect(await inProgress()).toEqual([]);
  });

  it("a job's next start moves a start whose run never wrote its record into the log", async () => {
    const dead = randomUUID();
    const next = randomUUID();
    const start = (id: string, second: number): RunLogInsert => ({
      ...row("died", 1),
      timestamp: new Date(Date.UTC(2026, 11, 1, 0, 0, second)),
      id,
      event: "start",
      message: "job started",
      meta: { scheduledAt: "2026-12-01T00:00:00.000Z", instanceId: "instance-a" },
    });
    await writeRunLogRows(db.pool, [start(dead, 1)]);
    await writeRunLogRows(db.pool, [start(next, 30)]);
    const { rows } = await db.pool.query(
      "SELECT id, event, message, timestamp, meta FROM agenda_logs WHERE job_name = 'died'",
    );
    expect(rows).toEqual([
      {
        id: dead,
        event: "start",
        message: "job started",
        timestamp: new Date(Date.UTC(2026, 11, 1, 0, 0, 1)),
        // the instance is the row's agenda_name: not repeated in meta (COMPACT_META)
        meta: { scheduledAt: "2026-12-01T00:00:00.000Z" },
      },
    ]);
    const inProgress = await db.pool.query("SELECT id FROM cronwarden_run_starts WHERE job_name = 'died'");
    expect(inProgress.rows).toEqual([{ id: next }]);
  });

  it("a job's record and its next run's start in one batch: the finished run is one record, the next is in progress", async () => {
    const first = randomUUID();
    const second = randomUUID();
    const start = (id: string, second: number): RunLogInsert => ({
      ...row("back-to-back", 1),
      timestamp: new Date(Date.UTC(2026, 11, 1, 0, 0, second)),
      id,
      event: "start",
      message: "job started",
      meta: { scheduledAt: new Date(Date.UTC(2026, 11, 1, 0, 0, second)).toISOString() },
    });
    await writeRunLogRows(db.pool, [start(first, 1)]);
    await writeRunLogRows(db.pool, [{ ...row("back-to-back", 1), replaces: first }, start(second, 2)]);
    const { rows } = await db.pool.query("SELECT id, event FROM agenda_logs WHERE job_name = 'back-to-back'");
    expect(rows).toEqual([{ id: first, event: "success" }]);
    const inProgress = await db.pool.query(
      "SELECT id FROM cronwarden_run_starts WHERE job_name = 'back-to-back'",
    );
    expect(inProgress.rows).toEqual([{ id: second }]);
  });

  it("a record whose start was moved into the log by the job's next start (another instance, first) takes its place", async () => {
    const first = randomUUID();
    const start = (id: string, second: number): RunLogInsert => ({
      ...row("overtaken", 1),
      timestamp: new Date(Date.UTC(2026, 11, 1, 0, 0, second)),
      id,
      event: "start",
      message: "job started",
      meta: { scheduledAt: new Date(Date.UTC(2026, 11, 1, 0, 0, second)).toISOString() },
    });
    await writeRunLogRows(db.pool, [start(first, 1)]);
    await writeRunLogRows(db.pool, [start(randomUUID(), 2)]); // moves the first start into the log
    await writeRunLogRows(db.pool, [{ ...row("overtaken", 1), replaces: first }]);
    const { rows } = await db.pool.query("SELECT id, event FROM agenda_logs WHERE job_name = 'overtaken'");
    expect(rows).toEqual([{ id: first, event: "success" }]);
  });
});

describe("a batch written again (its first answer lost)", () => {
  it("writes each row once: the rows' ids are chosen before the first try", async () => {
    const rows = [0, 1, 2].map((index) => ({ ...row("retried", index), id: crypto.randomUUID() }));
    await insertRunLogRows(db.pool, rows);
    await insertRunLogRows(db.pool, rows);
    const { rows: written } = await db.pool.query<{ count: number }>(
      "SELECT count(*)::int AS count FROM agenda_logs WHERE job_name = 'retried'",
    );
    expect(written).toEqual([{ count: 3 }]);
  });

  it("a record and a start written again are each written once: one record, one run in progress", async () => {
    const first = randomUUID();
    const second = randomUUID();
    const start = (id: string, second: number): RunLogInsert => ({
      ...row("retried-run", 1),
      timestamp: new Date(Date.UTC(2026, 11, 1, 0, 0, second)),
      id,
      event: "start",
      message: "job started",
      meta: { scheduledAt: new Date(Date.UTC(2026, 11, 1, 0, 0, second)).toISOString() },
    });
    await writeRunLogRows(db.pool, [start(first, 1)]);
    const batch = [{ ...row("retried-run", 1), id: first, replaces: first }, start(second, 2)];
    await writeRunLogRows(db.pool, batch);
    await writeRunLogRows(db.pool, batch);
    const { rows } = await db.pool.query("SELECT id, event FROM agenda_logs WHERE job_name = 'retried-run'");
    expect(rows).toEqual([{ id: first, event: "success" }]);
    const inProgress = await db.pool.query(
      "SELECT id FROM cronwarden_run_starts WHERE job_name = 'retried-run'",
    );
    expect(inProgress.rows).toEqual([{ id: second }]);
  });
});

describe("the run a re-run repeats (selectLastStart)", () => {
  it.each(["interrupted", "lock-lost"])(
    "finds a %s run by its record (not final: the re-run repeats it), not a failed one",
    async (outcome) => {
      const job = `unfinished-${outcome}`;
      const record = (second: number, recordOutcome: string): RunLogInsert => {
        const startedAt = new Date(Date.UTC(2026, 11, 1, 0, 0, second));
        return {
          ...row(job, 1),
          jobId: job,
          id: randomUUID(),
          timestamp: new Date(startedAt.getTime() + 500),
          event: "fail",
          error: "cut",
          meta: {
            scheduledAt: startedAt.toISOString(),
            startedAt: startedAt.toISOString(),
            outcome: recordOutcome,
          },
        };
      };
      await writeRunLogRows(db.pool, [record(1, outcome), record(10, "failed")]);
      const found = await selectLastStart(db.pool, job, new Date(Date.UTC(2026, 11, 1, 0, 1)));
      expect(found?.timestamp).toEqual(new Date(Date.UTC(2026, 11, 1, 0, 0, 1)));
      expect(found?.meta).toMatchObject({ outcome });
    },
  );
});

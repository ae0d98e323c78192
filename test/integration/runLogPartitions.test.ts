import { randomUUID } from "node:crypto";
import { getCreateLogsTableSQL, PostgresJobLogger } from "@agendajs/postgres-backend";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { migrateSchema, SCHEMA_VERSION } from "../../src/engine/schema.js";
import {
  ensurePartitionsAhead,
  LEGACY_PARTITION,
  listPartitions,
  PARTITIONS_AHEAD_MS,
  pruneRunLog,
  type RunLogInsert,
  searchRunLog,
  writeRunLogRows,
} from "../../src/engine/sql.js";
import { readHistory, readRunDetail } from "../../src/status/runHistory.js";
import { createTestDatabase, type TestDatabase } from "../helpers/database.js";
import { pollUntil } from "../helpers/poll.js";

/**
 * The run log partitioned by time (src/engine/sql/runLogPartitions.ts, schema step 11): the
 * conversion of a log with rows, the partitions ahead, retention by partition, and each record
 * written once across a partition's boundary and while a partition is dropped.
 */

const DAY = 86_400_000;
let db: TestDatabase;

beforeAll(async () => {
  db = await createTestDatabase();
  await migrateSchema(db.pool);
});

afterAll(async () => {
  await db?.drop();
});

function record(task: string, at: Date, extra: Partial<RunLogInsert> = {}): RunLogInsert {
  return {
    id: randomUUID(),
    timestamp: at,
    level: "info",
    event: "success",
    jobId: `job-${task}`,
    jobName: task,
    message: "job succeeded",
    agendaName: "i1",
    meta: {
      scheduledAt: new Date(at.getTime() - 500).toISOString(),
      startedAt: new Date(at.getTime() - 400).toISOString(),
      finishedAt: at.toISOString(),
      outcome: "succeeded",
      started: true,
    },
    ...extra,
  };
}

function start(task: string, id: string, at: Date): RunLogInsert {
  return {
    id,
    timestamp: at,
    level: "info",
    event: "start",
    jobId: `job-${task}`,
    jobName: task,
    message: "job started",
    agendaName: "i1",
    meta: { scheduledAt: at.toISOString() },
  };
}

async function rowsOf(
  pool: pg.Pool,
  task: string,
): Promise<{ id: string; event: string; partition: string }[]> {
  const { rows } = await pool.query(
    "SELECT id, event, tableoid::regclass::text AS partition FROM agenda_logs WHERE job_name = $1 ORDER BY timestamp",
    [task],
  );
  return rows;
}

describe("schema step 11 on a run log with rows", () => {
  it("makes the table the legacy partition: its rows stay and read as before (history, run detail, search, Agenda's getLogs)", async () => {
    const old = await createTestDatabase();
    try {
      await migrateSchema(old.pool);
      // version 10's run log: Agenda's plain table, with its indexes and rows
      await old.pool.query(`
        DROP TABLE agenda_logs CASCADE;
        ${getCreateLogsTableSQL("agenda_logs")};
        CREATE INDEX agenda_logs_timestamp_idx ON agenda_logs (timestamp DESC);
        CREATE INDEX agenda_logs_job_name_idx ON agenda_logs (job_name, timestamp DESC);
        CREATE INDEX agenda_logs_cw_slot_idx ON agenda_logs (job_name, (meta->>'scheduledAt')) WHERE event IN ('success', 'fail', 'retry');
        CREATE INDEX agenda_logs_cw_search_idx ON agenda_logs USING gin ((cronwarden_run_text(error, meta)));
        UPDATE cronwarden_schema SET version = 10;`);
      const { rows: inserted } = await old.pool.query<{ id: string }>(
        `INSERT INTO agenda_logs (timestamp, level, event, job_id, job_name, message, duration, error, agenda_name, meta)
         VALUES ('2026-11-01T00:00:00.510Z', 'info', 'success', 'j1', 'old-task', 'job succeeded', 500, NULL, 'i1',
                 '{"scheduledAt": "2026-11-01T00:00:00.000Z", "startedAt": "2026-11-01T00:00:00.010Z", "outcome": "succeeded", "started": true}'),
                ('2026-11-02T00:00:00.510Z', 'error', 'fail', 'j1', 'old-task', 'job failed', 500, 'ECONNRESET upstream', 'i1',
                 '{"scheduledAt": "2026-11-02T00:00:00.000Z", "startedAt": "2026-11-02T00:00:00.010Z", "outcome": "failed", "started": true}')
         RETURNING id`,
      );
      await old.pool.query("CREATE ROLE cw_partitions_reader");
      await old.pool.query("GRANT SELECT ON agenda_logs TO cw_partitions_reader");

      expect(await migrateSchema(old.pool)).toEqual({ from: 10, to: SCHEMA_VERSION });
      const kind = await old.pool.query("SELECT relkind FROM pg_class WHERE relname = 'agenda_logs'");
      expect(kind.rows).toEqual([{ relkind: "p" }]);
      const partitions = await listPartitions(old.pool);
      expect(partitions[0]).toMatchObject({ name: LEGACY_PARTITION, lower: null });
      expect(await rowsOf(old.pool, "old-task")).toEqual(
        inserted.map((row, index) => ({
          id: row.id,
          event: index === 0 ? "success" : "fail",
          partition: LEGACY_PARTITION,
        })),
      );
      // the readers
      const history = await readHistory(old.pool, { task: "old-task", limit: 10 });
      expect(history.runs.map((run) => [run.id, run.outcome])).toEqual([
        [inserted[1]?.id, "failed"],
        [inserted[0]?.id, "succeeded"],
      ]);
      expect(await readRunDetail(old.pool, inserted[0]?.id as string)).toMatchObject({
        outcome: "succeeded",
      });
      const found = await searchRunLog(old.pool, { text: "ECONNRESET", limit: 10 }, new Date());
      expect(found.map((row) => row.id)).toEqual([inserted[1]?.id]);
      const agenda = new PostgresJobLogger({ pool: old.pool, tableName: "agenda_logs", ensureSchema: false });
      const logs = await agenda.getLogs({ jobName: "old-task" });
      expect(logs.total).toBe(2);
      // Agenda's own insert (its id from the column's default): today's in the legacy partition (it ends with the
      // day of the conversion), the day after tomorrow's in its own
      await agenda.log({
        timestamp: new Date(),
        level: "info",
        event: "start",
        jobName: "agenda-task",
        message: "m",
      });
      const later = new Date(Date.now() + 2 * DAY);
      await agenda.log({
        timestamp: later,
        level: "info",
        event: "start",
        jobName: "agenda-task",
        message: "m",
      });
      expect((await rowsOf(old.pool, "agenda-task")).map((row) => row.partition)).toEqual([
        LEGACY_PARTITION,
        `agenda_logs_p${later.toISOString().slice(0, 10).replaceAll("-", "")}`,
      ]);
      // the legacy partition's indexes serve the parent's (attached, not built again), and the grant stays
      const legacyIndexes = await old.pool.query<{ name: string }>(
        `SELECT c.relname AS name FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
          WHERE i.indrelid = '${LEGACY_PARTITION}'::regclass ORDER BY 1`,
      );
      expect(legacyIndexes.rows.map((row) => row.name)).toEqual(
        expect.arrayContaining(["agenda_logs_legacy_cw_search_idx", "agenda_logs_legacy_timestamp_idx"]),
      );
      const grant = await old.pool.query(
        "SELECT has_table_privilege('cw_partitions_reader', 'agenda_logs', 'SELECT') AS granted",
      );
      expect(grant.rows).toEqual([{ granted: true }]);
      // again: nothing changes
      await old.pool.query("UPDATE cronwarden_schema SET version = 10");
      expect(await migrateSchema(old.pool)).toEqual({ from: 10, to: SCHEMA_VERSION });
      expect((await listPartitions(old.pool)).map((partition) => partition.name)).toEqual(
        partitions.map((partition) => partition.name),
      );
      expect((await rowsOf(old.pool, "old-task")).map((row) => row.id)).toEqual(
        inserted.map((row) => row.id),
      );
    } finally {
      await old.pool.query("DROP OWNED BY cw_partitions_reader").catch(() => {});
      await old.drop();
      await db.pool.query("DROP ROLE IF EXISTS cw_partitions_reader").catch(() => {});
    }
  });
});

describe("partitions ahead", () => {
  it("cover now and the days ahead, once, when several instances create them at once", async () => {
    const now = new Date(Date.UTC(2031, 0, 1, 12));
    const pools = Array.from({ length: 4 }, () => new pg.Pool({ connectionString: db.url, max: 1 }));
    try {
      const created = await Promise.all(pools.map((pool) => ensurePartitionsAhead(pool, 24, now)));
      // 2031-01-01 to 2031-01-04 12:00: four days, created by whichever came first
      expect(created.reduce((sum, count) => sum + count, 0)).toBe(4);
    } finally {
      await Promise.all(pools.map((pool) => pool.end()));
    }
    const ahead = (await listPartitions(db.pool)).filter(
      (partition) => partition.upper.getTime() > now.getTime(),
    );
    expect(ahead[0]?.lower).toEqual(new Date(Date.UTC(2031, 0, 1)));
    expect(ahead.at(-1)?.upper.getTime()).toBeGreaterThanOrEqual(now.getTime() + PARTITIONS_AHEAD_MS);
    for (let i = 1; i < ahead.length; i++) expect(ahead[i]?.lower).toEqual(ahead[i - 1]?.upper);
    expect(await ensurePartitionsAhead(db.pool, 24, now)).toBe(0);
    // a narrower width fills only the gaps: no partition overlaps
    expect(await ensurePartitionsAhead(db.pool, 6, new Date(Date.UTC(2031, 0, 4, 12)))).toBeGreaterThan(0);
    const all = await listPartitions(db.pool);
    for (let i = 1; i < all.length; i++)
      expect(all[i]?.lower?.getTime()).toBeGreaterThanOrEqual(all[i - 1]?.upper.getTime() as number);
  });

  it("a row for a time no partition covers has its partition created when it is written", async () => {
    const far = new Date(Date.UTC(2040, 5, 1, 3));
    await writeRunLogRows(db.pool, [record("far-ahead", far)]);
    expect(await rowsOf(db.pool, "far-ahead")).toEqual([
      { id: expect.any(String), event: "success", partition: "agenda_logs_p20400601" },
    ]);
  });
});

describe("retention by partition", () => {
  it("drops the partitions older than the retention; the newer rows stay", async () => {
    const now = new Date(Date.UTC(2032, 2, 10, 12));
    await ensurePartitionsAhead(db.pool, 24, now);
    const old = [
      record("aged", new Date(now.getTime() - 40 * DAY)),
      record("aged", new Date(now.getTime() - 35 * DAY)),
    ];
    const recent = [3, 2, 1].map((hours) => record("aged", new Date(now.getTime() - hours * 3_600_000)));
    await writeRunLogRows(db.pool, [...old, ...recent]);
    const before = await listPartitions(db.pool);
    expect(before.map((partition) => partition.name)).toEqual(
      expect.arrayContaining(["agenda_logs_p20320130", "agenda_logs_p20320204"]),
    );

    const deleted = await pruneRunLog(db.pool, {
      before: new Date(now.getTime() - 30 * DAY),
      keepPerTask: 0,
    });
    expect(deleted).toBeGreaterThanOrEqual(2);
    const names = (await listPartitions(db.pool)).map((partition) => partition.name);
    expect(names).not.toContain("agenda_logs_p20320130");
    expect(names).not.toContain("agenda_logs_p20320204");
    expect(names).toContain("agenda_logs_p20320310");
    expect((await rowsOf(db.pool, "aged")).map((row) => row.id)).toEqual(recent.map((row) => row.id));
    const leftOver = await db.pool.query("SELECT to_regclass('agenda_logs_p20320130') AS table");
    expect(leftOver.rows).toEqual([{ table: null }]);
  });
});

describe("each record written once", () => {
  it("across a partition's boundary: a record whose start, moved into the log, is in yesterday's partition; a batch written twice", async () => {
    const midnight = Date.UTC(2033, 4, 2);
    await ensurePartitionsAhead(db.pool, 24, new Date(midnight - DAY));
    const first = randomUUID();
    await writeRunLogRows(db.pool, [start("boundary", first, new Date(midnight - 100))]);
    await writeRunLogRows(db.pool, [start("boundary", randomUUID(), new Date(midnight - 50))]); // moves the first into the log
    expect(await rowsOf(db.pool, "boundary")).toEqual([
      { id: first, event: "start", partition: "agenda_logs_p20330501" },
    ]);
    const ending = record("boundary", new Date(midnight + 100), { id: undefined, replaces: first });
    await writeRunLogRows(db.pool, [ending]);
    await writeRunLogRows(db.pool, [ending]); // its answer lost: written again
    expect(await rowsOf(db.pool, "boundary")).toEqual([
      { id: first, event: "success", partition: "agenda_logs_p20330502" },
    ]);
  });

  it("a record and the job's next start written at the same moment: one row for the run, whichever comes first", async () => {
    const at = Date.UTC(2033, 4, 3, 10);
    await ensurePartitionsAhead(db.pool, 24, new Date(at));
    for (let round = 0; round < 20; round++) {
      const task = `race-${round}`;
      const first = randomUUID();
      await writeRunLogRows(db.pool, [start(task, first, new Date(at + round))]);
      await Promise.all([
        writeRunLogRows(db.pool, [
          record(task, new Date(at + round + 500), { id: undefined, replaces: first }),
        ]),
        writeRunLogRows(db.pool, [start(task, randomUUID(), new Date(at + round + 400))]),
      ]);
      expect(await rowsOf(db.pool, task)).toEqual([
        { id: first, event: "success", partition: "agenda_logs_p20330503" },
      ]);
    }
  });

  it("while a partition is dropped: runs go on being recorded, the drop waits for the readers, not the runs for the drop", async () => {
    const now = Date.UTC(2034, 5, 1, 12);
    await ensurePartitionsAhead(db.pool, 24, new Date(now));
    const doomed = new Date(now - 60 * DAY);
    await writeRunLogRows(db.pool, [record("dropped-day", doomed)]);
    expect((await rowsOf(db.pool, "dropped-day"))[0]?.partition).toBe("agenda_logs_p20340402");
    // a long reader of the run log holds it open: the drop waits for it (DETACH ... CONCURRENTLY)
    const reader = await db.pool.connect();
    await reader.query("BEGIN");
    await reader.query("SELECT count(*) FROM agenda_logs");
    let dropped = false;
    const prune = pruneRunLog(db.pool, { before: new Date(now - 59 * DAY), keepPerTask: 0 }).then((count) => {
      dropped = true;
      return count;
    });
    try {
      await pollUntil(
        "the detach waiting for the reader",
        async () =>
          (
            await db.pool.query(
              "SELECT 1 FROM pg_stat_activity WHERE query LIKE 'ALTER TABLE \"agenda_logs\" DETACH PARTITION \"agenda_logs_p2%' AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()",
            )
          ).rowCount === 1,
      );
      // runs are recorded meanwhile, each once
      const during = Array.from({ length: 50 }, (_, index) => record("during-drop", new Date(now + index)));
      for (const row of during) await writeRunLogRows(db.pool, [row]);
      expect((await rowsOf(db.pool, "during-drop")).length).toBe(50);
      expect(dropped).toBe(false);
    } finally {
      await reader.query("COMMIT");
      reader.release();
    }
    expect(await prune).toBeGreaterThanOrEqual(1);
    expect(await rowsOf(db.pool, "dropped-day")).toEqual([]);
    expect((await rowsOf(db.pool, "during-drop")).length).toBe(50);
  });
});

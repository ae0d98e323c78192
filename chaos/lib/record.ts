/**
 * Reading a run's record for chaos/lib/check.ts: the instances' handler journals (files), and the
 * run log and audit trail (the database). Shared by the chaos run (chaos/run.ts) and the
 * process-level failover tests (test/integration/patroni.test.ts).
 */
import { readdir, readFile } from "node:fs/promises";
import path from "node:path";
import type pg from "pg";
import type { AuditRow, HandlerRun, LogRow } from "./check.js";
import type { ShardExecution, ShardRowRecord, ShardSlotRow } from "./shardCheck.js";
import type { JournalLine, ShardJournalLine } from "./spec.js";

/** Every handler execution in the `journal-*` files of `logDir` (one per start line, with its end if any). */
export async function readJournals(logDir: string): Promise<HandlerRun[]> {
  const all: HandlerRun[] = [];
  const latest = new Map<string, HandlerRun>();
  for (const file of await readdir(logDir)) {
    if (!file.startsWith("journal-")) continue;
    const text = await readFile(path.join(logDir, file), "utf8");
    for (const line of text.split("\n")) {
      if (!line.trim()) continue;
      let entry: JournalLine;
      try {
        entry = JSON.parse(line) as JournalLine;
      } catch {
        continue; // a line cut by a SIGKILL mid-write
      }
      // the same instance can run the same slot twice (that is a duplicate): an end belongs to the latest start
      const k = `${entry.instance}|${entry.task}|${entry.slot}|${entry.attempt}`;
      if (entry.event === "start") {
        const run: HandlerRun = {
          task: entry.task,
          slot: Date.parse(entry.slot),
          instance: entry.instance,
          pid: entry.pid,
          attempt: entry.attempt,
          startedAt: entry.at,
          finishedAt: null,
          error: null,
          rerunOf:
            entry.rerunOf === null
              ? null
              : entry.rerunOf === "unknown"
                ? Number.NaN
                : Date.parse(entry.rerunOf),
        };
        all.push(run);
        latest.set(k, run);
      } else {
        const run = latest.get(k);
        if (run) {
          run.finishedAt = entry.at;
          run.error = entry.error;
        }
      }
    }
  }
  return all;
}

/** The run log's rows, as the check reads them. */
export async function readLogRows(client: pg.ClientBase): Promise<LogRow[]> {
  const { rows } = await client.query<{
    job_name: string;
    event: string;
    timestamp: Date;
    meta: Record<string, unknown> | null;
    error: string | null;
    agenda_name: string | null;
  }>(
    // the run log, and every start as a start row: a record whose handler started stands for its
    // start (`meta.started`, at `meta.startedAt`), and the runs still in progress have theirs in
    // cronwarden_run_starts (src/engine/sql/runStarts.ts)
    `SELECT job_name, event, timestamp, meta, error, agenda_name FROM agenda_logs
     UNION ALL
     SELECT job_name, 'start', (meta->>'startedAt')::timestamptz, meta - 'outcome', NULL, agenda_name
       FROM agenda_logs WHERE event IN ('success', 'fail') AND meta->>'started' = 'true'
     UNION ALL
     SELECT job_name, 'start', timestamp, meta, NULL, agenda_name FROM cronwarden_run_starts`,
  );
  return rows.map(
    (row): LogRow => ({
      task: row.job_name,
      event: row.event,
      timestamp: row.timestamp.getTime(),
      slot: typeof row.meta?.scheduledAt === "string" ? Date.parse(row.meta.scheduledAt) : null,
      // absent when it is the row's agenda_name (src/engine/sql/runStarts.ts COMPACT_META)
      instance: typeof row.meta?.instanceId === "string" ? row.meta.instanceId : row.agenda_name,
      outcome: typeof row.meta?.outcome === "string" ? row.meta.outcome : null,
      rerun: row.meta?.rerun === true,
      duplicateOf: row.meta?.duplicateOf !== undefined,
      error: row.error,
    }),
  );
}

/** The audit trail of applied config changes, oldest first. */
export async function readAudit(client: pg.ClientBase): Promise<AuditRow[]> {
  const { rows } = await client.query<{
    task: string;
    at: Date;
    field: string;
    new_value: string | null;
    revision: string;
  }>("SELECT task, at, field, new_value, revision FROM cronwarden_audit ORDER BY at, id");
  return rows.map(
    (row): AuditRow => ({
      task: row.task,
      at: row.at.getTime(),
      field: row.field,
      newValue: row.new_value,
      revision: row.revision,
    }),
  );
}

/** Every shard and reduce execution in the `shards-*` journals of `logDir` (one per start, with its end if any). */
export async function readShardJournals(logDir: string): Promise<ShardExecution[]> {
  const all: ShardExecution[] = [];
  const latest = new Map<string, ShardExecution>();
  for (const file of await readdir(logDir)) {
    if (!file.startsWith("shards-")) continue;
    const text = await readFile(path.join(logDir, file), "utf8");
    for (const line of text.split("\n")) {
      if (!line.trim()) continue;
      let entry: ShardJournalLine;
      try {
        entry = JSON.parse(line) as ShardJournalLine;
      } catch {
        continue; // a line cut by a SIGKILL mid-write
      }
      const k = `${entry.instance}|${entry.task}|${entry.slot}|${entry.index}`;
      if (entry.event === "shard-start" || entry.event === "reduce-start") {
        const run: ShardExecution = {
          task: entry.task,
          slot: Date.parse(entry.slot),
          index: entry.index,
          instance: entry.instance,
          startedAt: entry.at,
          finishedAt: null,
          error: null,
        };
        all.push(run);
        latest.set(k, run);
      } else {
        const run = latest.get(k);
        if (run) {
          run.finishedAt = entry.at;
          run.error = entry.error ?? null;
        }
      }
    }
  }
  return all;
}

/** The sharded slots and their shards, as the shard check reads them. */
export async function readShardRecord(
  client: pg.ClientBase,
): Promise<{ slots: ShardSlotRow[]; shards: ShardRowRecord[] }> {
  const exists = await client.query<{ ok: boolean }>(
    "SELECT to_regclass('cronwarden_shard_slots') IS NOT NULL AS ok",
  );
  if (!exists.rows[0]?.ok) return { slots: [], shards: [] };
  const slots = await client.query<{
    task_name: string;
    scheduled_at: Date;
    round: number;
    shard_count: number;
    reduce_state: string;
    reduce_runs: number;
    reduce_holder: string | null;
    outcome: string | null;
    detail: string | null;
  }>(
    "SELECT task_name, scheduled_at, round, shard_count, reduce_state, reduce_runs, reduce_holder, outcome, detail FROM cronwarden_shard_slots",
  );
  const shards = await client.query<{
    task_name: string;
    scheduled_at: Date;
    round: number;
    shard_index: number;
    state: string;
    holder: string | null;
    runs: number;
    error: string | null;
  }>("SELECT task_name, scheduled_at, round, shard_index, state, holder, runs, error FROM cronwarden_shards");
  return {
    slots: slots.rows.map((row) => ({
      task: row.task_name,
      slot: row.scheduled_at.getTime(),
      round: row.round,
      shardCount: row.shard_count,
      reduceState: row.reduce_state,
      reduceRuns: row.reduce_runs,
      reduceHolder: row.reduce_holder,
      outcome: row.outcome,
      detail: row.detail,
    })),
    shards: shards.rows.map((row) => ({
      task: row.task_name,
      slot: row.scheduled_at.getTime(),
      round: row.round,
      index: row.shard_index,
      state: row.state,
      holder: row.holder,
      runs: row.runs,
      error: row.error,
    })),
  };
}

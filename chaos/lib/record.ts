/**
 * Reading a run's record for chaos/lib/check.ts: the instances' handler journals (files), and the
 * run log and audit trail (the database). Shared by the chaos run (chaos/run.ts) and the
 * process-level failover tests (test/integration/patroni.test.ts).
 */
import { readdir, readFile } from "node:fs/promises";
import path from "node:path";
import type pg from "pg";
import type { AuditRow, HandlerRun, LogRow } from "./check.js";
import type { JournalLine } from "./spec.js";

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

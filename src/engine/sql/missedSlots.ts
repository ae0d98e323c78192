import { JOBS_TABLE, type Queryable } from "./tables.js";

/** The silent-stop check (src/engine/missedSlotDetector.ts): overdue jobs, one report per slot. */

export interface OverdueRow {
  id: string;
  name: string;
  next_run_at: Date | null;
  locked_at: Date | null;
  priority: number;
}

/**
 * Enabled jobs that should have started and did not: next run past by more than `graceMs` with no
 * live lock (none, or one older than the lock lifetime), or no next run at all.
 */
export async function selectOverdueJobs(
  db: Queryable,
  /** The names, or their array literal (textArrayLiteral) made once for a check that repeats. */
  names: readonly string[] | string,
  graceMs: number,
  lockLifetimeMs: number,
): Promise<OverdueRow[]> {
  const result = await db.query<OverdueRow>(
    `SELECT id, name, next_run_at, locked_at, priority FROM "${JOBS_TABLE}"
      WHERE type = 'single' AND disabled = FALSE AND name = ANY($1::text[])
        AND NOT (coalesce(data, '{}'::jsonb) ? 'after')
        AND ((next_run_at IS NULL AND NOT coalesce(data->'policy' ? 'at', false))
             OR next_run_at < now() - make_interval(secs => $2::double precision / 1000))
        AND (locked_at IS NULL OR locked_at < now() - make_interval(secs => $3::double precision / 1000))`,
    [names, graceMs, lockLifetimeMs],
  );
  return result.rows;
}

/**
 * A PostgreSQL array literal of `values` (`{"a","b"}`), to pass as a `text[]` parameter. pg
 * serializes an array parameter again at every query: for a check every few seconds over
 * 10,000 names, made once instead (about 1.7 MB of garbage per check).
 */
export function textArrayLiteral(values: readonly string[]): string {
  return `{${values.map((value) => `"${value.replace(/["\\]/g, "\\$&")}"`).join(",")}}`;
}

/**
 * Claims the report of a missed slot: true for exactly one instance per (job, slot), so that
 * several instances noticing the same missed slot raise one alert between them.
 */
export async function claimMissedSlotReport(db: Queryable, jobId: string, slot: string): Promise<boolean> {
  const result = await db.query(
    `UPDATE "${JOBS_TABLE}" SET data = coalesce(data, '{}'::jsonb) || jsonb_build_object('missedSlotReported', $2::text)
      WHERE id = $1 AND (data->>'missedSlotReported') IS DISTINCT FROM $2::text`,
    [jobId, slot],
  );
  return result.rowCount === 1;
}

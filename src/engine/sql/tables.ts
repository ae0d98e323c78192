import type { ClientBase, Pool } from "pg";
import { isoTime } from "../../core/isoTime.js";

/** The tables the engine's statements touch, and the advisory-lock keys it takes. */

export const JOBS_TABLE = "agenda_jobs";
export const LOGS_TABLE = "agenda_logs";

/** Every instance that has taken part in liveness since it last stopped (its lock is its life). */
export const INSTANCES_TABLE = "cronwarden_instances";
/** Instances found dead by the liveness check, with the tasks whose runs were handed over (kept 7 days). */
export const INSTANCE_DEATHS_TABLE = "cronwarden_instance_deaths";

/** pg_advisory_lock keys: arbitrary constants, unique to cronwarden ("cw" + purpose). */
export const SCHEMA_LOCK_KEY = 0x6377_0001;
export const RECONCILE_LOCK_KEY = 0x6377_0002;
export const RETENTION_LOCK_KEY = 0x6377_0003;

/**
 * The first key of an instance's liveness lock (the two-key form of pg_advisory_lock); the second
 * is hashtext(instance id). The single-key locks above show in pg_locks with objsubid 1, these
 * with objsubid 2, so they never meet.
 */
export const LIVENESS_LOCK_NAMESPACE = 0x6377_0004;

export type Queryable = Pool | ClientBase;

/** A downstream task's wait for one slot, and its claim: one row per (downstream, slot) (docs/dependencies.md). */
export const DEPENDENCY_WAITS_TABLE = "cronwarden_dependency_waits";

/**
 * Rows for one statement as a JSON array, read with jsonb_to_recordset: the batched statements
 * (the saves and run-log rows of a herd) pass one string built natively instead of an array
 * parameter per column, which pg serializes element by element in JavaScript (a fifth of what a
 * herd allocated). The server reads it as `jsonb`, which it parses once, where `json` is parsed
 * again for every field read out of it.
 * What PostgreSQL cannot take becomes U+FFFD, so that one task's text does not fail the rows of
 * the others in its batch: a NUL (no PostgreSQL text holds one) and a lone surrogate (a message
 * cut inside an emoji, as the run journal's cut lines can be; JSON input refuses its escape).
 */
export function jsonRecords(rows: readonly object[]): string {
  const json = JSON.stringify(rows);
  // JSON.stringify escapes both (\u0000, \ud800-\udfff) and writes a surrogate pair as it is
  return json.includes("\\u0000") || json.includes("\\ud") ? JSON.stringify(rows, storable) : json;
}

const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g;

function storable(_key: string, value: unknown): unknown {
  return typeof value === "string"
    ? value.replaceAll("\u0000", "\uFFFD").replace(LONE_SURROGATE, "\uFFFD")
    : value;
}

/**
 * A time for a row of jsonRecords, as ISO text: JSON.stringify turns a Date into text through its
 * `toJSON`, about four times slower than a string already made (a save row carries up to seven);
 * isoTime (src/core/isoTime.ts) makes that string five times faster than `toISOString`.
 * An invalid Date becomes null, as `toJSON` makes it; text passes as it is.
 */
export function jsonTime(value: Date | string | null | undefined): string | null {
  if (value instanceof Date) return Number.isNaN(value.getTime()) ? null : isoTime(value);
  return value ?? null;
}

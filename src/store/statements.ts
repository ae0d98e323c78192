import { AUDIT_TABLE, DESIRED_STATE_TABLE } from "./schema.js";

/**
 * Every statement against cronwarden's own tables (their DDL is in ./schema.ts), named, each with
 * why it is shaped as it is. The classes in this folder only bind parameters and map rows.
 */

/**
 * One row per namespace, the last applied document wins. An upsert rather than an UPDATE after a
 * SELECT: two instances applying the same or consecutive snapshots at once both succeed, and no
 * first-ever save races another on the primary key. `applied_at` is the database's clock, so the
 * instances' clocks do not matter.
 */
export const SAVE_DESIRED_STATE = `
  INSERT INTO "${DESIRED_STATE_TABLE}" (namespace, document, source, revision, applied_at, applied_by)
  VALUES ($1, $2, $3, $4, now(), $5)
  ON CONFLICT (namespace) DO UPDATE
    SET document = EXCLUDED.document, source = EXCLUDED.source, revision = EXCLUDED.revision,
        applied_at = EXCLUDED.applied_at, applied_by = EXCLUDED.applied_by`;

/** The revision and source of the namespace's last applied document (is a save needed at all?). */
export const STORED_REVISION = `
  SELECT revision, source FROM "${DESIRED_STATE_TABLE}" WHERE namespace = $1`;

/** The namespace's last applied document, read at start-up before the config source answers. */
export const LOAD_DESIRED_STATE = `
  SELECT document, source, revision, applied_at, applied_by FROM "${DESIRED_STATE_TABLE}" WHERE namespace = $1`;

/**
 * The shared record of a converged reconcile on the namespace's row (src/reconcile/sharedConverged.ts).
 * An UPDATE, not an upsert: the row is the applied snapshot's, saved by the config pass before
 * any pass converges; with no snapshot saved there is nothing to record against. Only the three
 * small columns change, so the stored document is not written again.
 */
export const SAVE_CONVERGED = `
  UPDATE "${DESIRED_STATE_TABLE}" SET converged_revision = $2, converged_key = $3, converged_digest = $4
   WHERE namespace = $1`;

/** The shared record of the last converged reconcile, if any. */
export const LOAD_CONVERGED = `
  SELECT converged_revision, converged_key, converged_digest FROM "${DESIRED_STATE_TABLE}"
   WHERE namespace = $1 AND converged_digest IS NOT NULL`;

/** Parameters of one audit row, in the column order of insertAuditRows(). */
export const AUDIT_COLUMNS = 10;

/**
 * One INSERT of `rows` audit rows: a multi-row VALUES list, so a reconcile that changes many tasks
 * costs one round trip per batch rather than one per change. The caller keeps `rows` small enough
 * that rows x AUDIT_COLUMNS stays under PostgreSQL's 65,535 parameters per statement.
 */
export function insertAuditRows(rows: number): string {
  const values = Array.from({ length: rows }, (_, index) => {
    const base = index * AUDIT_COLUMNS;
    return `(${Array.from({ length: AUDIT_COLUMNS }, (_, offset) => `$${base + offset + 1}`).join(", ")})`;
  });
  return `INSERT INTO "${AUDIT_TABLE}" (namespace, task, kind, field, old_value, new_value, source, revision, instance, actor)
       VALUES ${values.join(", ")}`;
}

/**
 * The newest audit rows of a namespace, for one task or all ($2 NULL: one statement, one plan,
 * served by the (task, at) index when a task is given). Rows of one reconcile share `at` (the
 * transaction's now()), so `id` orders them as they were written.
 */
export const LIST_AUDIT = `
  SELECT * FROM "${AUDIT_TABLE}" WHERE namespace = $1 AND ($2::text IS NULL OR task = $2)
   ORDER BY at DESC, id DESC LIMIT $3`;

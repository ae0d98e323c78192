import type { Queryable } from "./tables.js";

/** The pause-all switch (docs/operations.md, "Pause all"): one row per namespace while it is on. */

export const PAUSE_TABLE = "cronwarden_pause";

/**
 * The channel every instance listens on (src/engine/notificationChannel.ts) for a switch flipped;
 * the payload is the namespace. pg_notify is sent at commit, so no instance reads the switch
 * before the change that woke it is visible.
 */
export const PAUSE_CHANNEL = "cronwarden_pause";

export const CREATE_PAUSE_TABLE = `
  CREATE TABLE IF NOT EXISTS "${PAUSE_TABLE}" (
    namespace  TEXT PRIMARY KEY,
    paused_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    paused_by  TEXT NOT NULL,
    reason     TEXT NOT NULL
  )`;

export interface PauseRow {
  paused_at: Date;
  paused_by: string;
  reason: string;
}

/** The namespace's switch: its row while it is on, undefined while off. */
export async function selectPause(db: Queryable, namespace: string): Promise<PauseRow | undefined> {
  const result = await db.query<PauseRow>(
    `SELECT paused_at, paused_by, reason FROM "${PAUSE_TABLE}" WHERE namespace = $1`,
    [namespace],
  );
  return result.rows[0];
}

/**
 * Turns the switch on: the row is inserted, or left as it is when it is on already (the first
 * pause's time, author and reason stand). Returns the row as it is now, and whether this call
 * turned it on. Notifies every instance in the same transaction.
 */
export async function insertPause(
  db: Queryable,
  namespace: string,
  by: string,
  reason: string,
): Promise<{ row: PauseRow; changed: boolean }> {
  const inserted = await db.query<PauseRow>(
    `WITH added AS (
       INSERT INTO "${PAUSE_TABLE}" (namespace, paused_by, reason) VALUES ($1, $2, $3)
       ON CONFLICT (namespace) DO NOTHING
       RETURNING paused_at, paused_by, reason)
     SELECT added.*, pg_notify('${PAUSE_CHANNEL}', $1) IS NULL AS notified FROM added`,
    [namespace, by, reason],
  );
  const row = inserted.rows[0];
  if (row)
    return { row: { paused_at: row.paused_at, paused_by: row.paused_by, reason: row.reason }, changed: true };
  const current = await selectPause(db, namespace);
  if (!current) throw new Error(`the pause of namespace "${namespace}" was lifted while it was being set`);
  return { row: current, changed: false };
}

/** Turns the switch off; the row it deleted, if it was on. Notifies every instance in the same transaction. */
export async function deletePause(db: Queryable, namespace: string): Promise<PauseRow | undefined> {
  const result = await db.query<PauseRow>(
    `WITH removed AS (
       DELETE FROM "${PAUSE_TABLE}" WHERE namespace = $1 RETURNING paused_at, paused_by, reason)
     SELECT removed.*, pg_notify('${PAUSE_CHANNEL}', $1) IS NULL AS notified FROM removed`,
    [namespace],
  );
  const row = result.rows[0];
  return row && { paused_at: row.paused_at, paused_by: row.paused_by, reason: row.reason };
}

import type { PoolClient } from "pg";

/** cronwarden's own tables, beside Agenda's. Created with Agenda's, under the same advisory lock. */
export const DESIRED_STATE_TABLE = "cronwarden_desired_state";
export const AUDIT_TABLE = "cronwarden_audit";

export async function createStoreTables(client: PoolClient): Promise<void> {
  await client.query(`
    CREATE TABLE IF NOT EXISTS "${DESIRED_STATE_TABLE}" (
      namespace   TEXT PRIMARY KEY,
      document    JSONB NOT NULL,
      source      TEXT NOT NULL,
      revision    TEXT NOT NULL,
      applied_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
      applied_by  TEXT NOT NULL
    )`);
  await client.query(`
    CREATE TABLE IF NOT EXISTS "${AUDIT_TABLE}" (
      id          BIGSERIAL PRIMARY KEY,
      at          TIMESTAMPTZ NOT NULL DEFAULT now(),
      namespace   TEXT NOT NULL,
      task        TEXT NOT NULL,
      kind        TEXT NOT NULL CHECK (kind IN ('change', 'drift')),
      field       TEXT NOT NULL,
      old_value   TEXT,
      new_value   TEXT,
      source      TEXT NOT NULL,
      revision    TEXT NOT NULL,
      instance    TEXT NOT NULL
    )`);
  await client.query(
    `CREATE INDEX IF NOT EXISTS "${AUDIT_TABLE}_task_at_idx" ON "${AUDIT_TABLE}" (task, at DESC)`,
  );
}

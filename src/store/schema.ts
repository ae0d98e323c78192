import type { PoolClient } from "pg";

/** cronwarden's own tables, beside Agenda's. Created with Agenda's, under the same advisory lock. */
export const DESIRED_STATE_TABLE = "cronwarden_desired_state";
export const AUDIT_TABLE = "cronwarden_audit";

/**
 * The steps that bring cronwarden's tables from one schema version to the next: step N (index
 * N - 1) makes version N. Each is written to be safe on a database that already has part of it
 * (versions before 1 kept no version number).
 */
export const STORE_MIGRATIONS: ReadonlyArray<(client: PoolClient) => Promise<void>> = [
  // 1: the desired state and the audit trail of config changes
  async (client) => {
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
  },
  // 2: run-now requests in the audit trail, with who asked
  async (client) => {
    await client.query(`ALTER TABLE "${AUDIT_TABLE}" ADD COLUMN IF NOT EXISTS actor TEXT`);
    await client.query(`ALTER TABLE "${AUDIT_TABLE}" DROP CONSTRAINT IF EXISTS "${AUDIT_TABLE}_kind_check"`);
    await client.query(
      `ALTER TABLE "${AUDIT_TABLE}" ADD CONSTRAINT "${AUDIT_TABLE}_kind_check" CHECK (kind IN ('change', 'drift', 'run-now'))`,
    );
  },
];

/**
 * The shared record of the last converged reconcile (schema step 13, src/engine/schema.ts): the
 * revision it applied, the key of what its plan depended on, and the job rows' digest after it.
 * Nullable: a snapshot saved before any pass converged has none.
 */
export const ADD_CONVERGED_COLUMNS = `
  ALTER TABLE "${DESIRED_STATE_TABLE}"
    ADD COLUMN IF NOT EXISTS converged_revision TEXT,
    ADD COLUMN IF NOT EXISTS converged_key TEXT,
    ADD COLUMN IF NOT EXISTS converged_digest TEXT`;

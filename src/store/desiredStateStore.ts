import type { Pool } from "pg";
import { DESIRED_STATE_TABLE } from "./schema.js";

/** The last applied valid config document, kept in PostgreSQL per namespace. */
export interface StoredDesiredState {
  document: unknown;
  source: string;
  revision: string;
  appliedAt: Date;
  appliedBy: string;
}

/**
 * So that an instance that (re)starts while the config center is unreachable still schedules
 * from the last config that was applied, not from nothing.
 */
export class DesiredStateStore {
  readonly #pool: Pool;
  readonly #namespace: string;

  constructor(pool: Pool, namespace: string) {
    this.#pool = pool;
    this.#namespace = namespace;
  }

  async save(state: {
    document: unknown;
    source: string;
    revision: string;
    appliedBy: string;
  }): Promise<void> {
    await this.#pool.query(
      `INSERT INTO "${DESIRED_STATE_TABLE}" (namespace, document, source, revision, applied_at, applied_by)
       VALUES ($1, $2, $3, $4, now(), $5)
       ON CONFLICT (namespace) DO UPDATE
         SET document = EXCLUDED.document, source = EXCLUDED.source, revision = EXCLUDED.revision,
             applied_at = EXCLUDED.applied_at, applied_by = EXCLUDED.applied_by`,
      [this.#namespace, JSON.stringify(state.document), state.source, state.revision, state.appliedBy],
    );
  }

  async load(): Promise<StoredDesiredState | undefined> {
    const result = await this.#pool.query<{
      document: unknown;
      source: string;
      revision: string;
      applied_at: Date;
      applied_by: string;
    }>(
      `SELECT document, source, revision, applied_at, applied_by FROM "${DESIRED_STATE_TABLE}" WHERE namespace = $1`,
      [this.#namespace],
    );
    const row = result.rows[0];
    return row
      ? {
          document: row.document,
          source: row.source,
          revision: row.revision,
          appliedAt: row.applied_at,
          appliedBy: row.applied_by,
        }
      : undefined;
  }
}

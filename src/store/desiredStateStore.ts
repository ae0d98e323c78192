import type { Pool } from "pg";
import { LOAD_DESIRED_STATE, SAVE_DESIRED_STATE } from "./statements.js";

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
    await this.#pool.query(SAVE_DESIRED_STATE, [
      this.#namespace,
      JSON.stringify(state.document),
      state.source,
      state.revision,
      state.appliedBy,
    ]);
  }

  async load(): Promise<StoredDesiredState | undefined> {
    const result = await this.#pool.query<{
      document: unknown;
      source: string;
      revision: string;
      applied_at: Date;
      applied_by: string;
    }>(LOAD_DESIRED_STATE, [this.#namespace]);
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

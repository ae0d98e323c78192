import type { Pool } from "pg";
import {
  LOAD_CONVERGED,
  LOAD_DESIRED_STATE,
  SAVE_CONVERGED,
  SAVE_DESIRED_STATE,
  STORED_REVISION,
} from "./statements.js";

/** A reconcile that converged: the revision it applied, what its plan depended on, the rows' digest after it. */
export interface ConvergedRecord {
  revision: string;
  key: string;
  digest: string;
}

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

  /**
   * Keeps `state` as the namespace's last applied document. A revision of the same source that is
   * stored already is not written again: the other instances applying the same change would each
   * send the whole document (5 MB for 100,000 tasks) to store what is there; the row keeps who
   * applied it first.
   */
  async save(state: {
    document: unknown;
    source: string;
    revision: string;
    appliedBy: string;
  }): Promise<void> {
    const stored = await this.#pool.query<{ revision: string; source: string }>(STORED_REVISION, [
      this.#namespace,
    ]);
    const row = stored.rows[0];
    if (row && row.revision === state.revision && row.source === state.source) return;
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

  /** Records a converged reconcile for the other instances (src/reconcile/sharedConverged.ts). */
  async saveConverged(record: ConvergedRecord): Promise<void> {
    await this.#pool.query(SAVE_CONVERGED, [this.#namespace, record.revision, record.key, record.digest]);
  }

  async loadConverged(): Promise<ConvergedRecord | undefined> {
    const result = await this.#pool.query<{
      converged_revision: string;
      converged_key: string;
      converged_digest: string;
    }>(LOAD_CONVERGED, [this.#namespace]);
    const row = result.rows[0];
    return row
      ? { revision: row.converged_revision, key: row.converged_key, digest: row.converged_digest }
      : undefined;
  }
}

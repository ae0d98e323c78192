import type { Pool, PoolClient } from "pg";
import { insertAuditRows, LIST_AUDIT } from "./statements.js";

export type AuditKind = "change" | "drift" | "run-now" | "resume";

export interface AuditEntry {
  task: string;
  /**
   * `change`: applied from a new config version; `drift`: repaired by the periodic full
   * reconcile; `run-now`: a manual run was requested (and accepted); `resume`: a task paused by
   * failure was resumed through the API or `scheduler.resume()`.
   */
  kind: AuditKind;
  field: string;
  oldValue: string | null;
  newValue: string | null;
  source: string;
  revision: string;
  instance: string;
  /** Who asked, for a `run-now` or `resume` (an admin token's name, never its secret); null for config changes. */
  actor?: string | null;
}

export interface AuditRecord extends AuditEntry {
  id: string;
  at: Date;
  namespace: string;
}

/** Rows per INSERT: AUDIT_COLUMNS (10) parameters each, well under PostgreSQL's limit of 65,535 per statement. */
const AUDIT_INSERT_BATCH = 1_000;

/** Every applied change to a task's schedule, durably: who, what, from which config version. */
export class AuditLog {
  readonly #pool: Pool;
  readonly #namespace: string;

  constructor(pool: Pool, namespace: string) {
    this.#pool = pool;
    this.#namespace = namespace;
  }

  /**
   * Inserts in batches: PostgreSQL takes at most 65,535 parameters per statement (10 per entry),
   * and a reconcile of 10,000 tasks writes tens of thousands of entries. Given a client, the
   * batches run in the caller's transaction; otherwise in one of their own, all or nothing.
   */
  async record(entries: AuditEntry[], db: Pool | PoolClient = this.#pool): Promise<void> {
    if (entries.length === 0) return;
    if (entries.length <= AUDIT_INSERT_BATCH) return this.#insert(entries, db);
    if (db !== this.#pool) {
      for (let start = 0; start < entries.length; start += AUDIT_INSERT_BATCH)
        await this.#insert(entries.slice(start, start + AUDIT_INSERT_BATCH), db);
      return;
    }
    const client = await this.#pool.connect();
    try {
      await client.query("BEGIN");
      for (let start = 0; start < entries.length; start += AUDIT_INSERT_BATCH)
        await this.#insert(entries.slice(start, start + AUDIT_INSERT_BATCH), client);
      await client.query("COMMIT");
    } catch (error) {
      await client.query("ROLLBACK").catch(() => {});
      throw error;
    } finally {
      client.release();
    }
  }

  async #insert(entries: AuditEntry[], db: Pool | PoolClient): Promise<void> {
    const values: unknown[] = [];
    for (const entry of entries) {
      values.push(
        this.#namespace,
        entry.task,
        entry.kind,
        entry.field,
        entry.oldValue,
        entry.newValue,
        entry.source,
        entry.revision,
        entry.instance,
        entry.actor ?? null,
      );
    }
    await db.query(insertAuditRows(entries.length), values);
  }

  async list(query: { task?: string; limit?: number } = {}): Promise<AuditRecord[]> {
    const result = await this.#pool.query<{
      id: string;
      at: Date;
      namespace: string;
      task: string;
      kind: AuditKind;
      field: string;
      old_value: string | null;
      new_value: string | null;
      source: string;
      revision: string;
      instance: string;
      actor?: string | null;
    }>(LIST_AUDIT, [this.#namespace, query.task ?? null, query.limit ?? 50]);
    return result.rows.map((row) => ({
      id: row.id,
      at: row.at,
      namespace: row.namespace,
      task: row.task,
      kind: row.kind,
      field: row.field,
      oldValue: row.old_value,
      newValue: row.new_value,
      source: row.source,
      revision: row.revision,
      instance: row.instance,
      actor: row.actor ?? null,
    }));
  }
}

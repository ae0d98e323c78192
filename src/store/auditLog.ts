import type { Pool, PoolClient } from "pg";
import { insertAuditRows, LIST_AUDIT } from "./statements.js";

export type AuditKind = "change" | "drift" | "run-now" | "resume" | "pause-all" | "resume-all";

export interface AuditEntry {
  task: string;
  /**
   * `change`: applied from a new config version; `drift`: repaired by the periodic full
   * reconcile; `run-now`: a manual run was requested (and accepted); `resume`: a task paused by
   * failure was resumed through the API or `scheduler.resume()`; `pause-all`/`resume-all`: the
   * namespace's pause-all switch was turned on or off (task `*`, the reason in `newValue`).
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
   * The entries are read batch by batch: a reconcile passes them as a generator, so 40,000 entries
   * of a 10,000-task start are never all in memory at once.
   */
  async record(entries: Iterable<AuditEntry>, db: Pool | PoolClient = this.#pool): Promise<void> {
    const batches = inBatches(entries, AUDIT_INSERT_BATCH);
    const first = batches.next();
    if (first.done) return;
    const second = batches.next();
    if (second.done) return this.#insert(first.value, db);
    const insertAll = async (client: Pool | PoolClient) => {
      await this.#insert(first.value, client);
      await this.#insert(second.value, client);
      for (const batch of batches) await this.#insert(batch, client);
    };
    if (db !== this.#pool) return insertAll(db);
    const client = await this.#pool.connect();
    try {
      await client.query("BEGIN");
      await insertAll(client);
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

function* inBatches<T>(items: Iterable<T>, size: number): Generator<T[], void, undefined> {
  let batch: T[] = [];
  for (const item of items) {
    batch.push(item);
    if (batch.length >= size) {
      yield batch;
      batch = [];
    }
  }
  if (batch.length > 0) yield batch;
}

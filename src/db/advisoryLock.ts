import type { PoolClient } from "pg";

/**
 * The one place that takes and frees PostgreSQL advisory locks (keys in src/engine/sql/tables.ts).
 * Session-level locks, not transaction-level: the work under them runs its own transactions
 * (the schema's migrations, the reconciler's writes, the retention's batches). So the lock belongs
 * to the connection, and the caller holds one connection for the whole work and releases it to
 * the pool only after the unlock here has run.
 */

/** Waits for the lock `key` on `client`, runs `work`, and frees the lock however `work` ends. */
export async function withAdvisoryLock<T>(
  client: PoolClient,
  key: number,
  work: () => Promise<T>,
): Promise<T> {
  await client.query("SELECT pg_advisory_lock($1)", [key]);
  try {
    return await work();
  } finally {
    await client.query("SELECT pg_advisory_unlock($1)", [key]);
  }
}

/**
 * Takes the lock `key` on `client` only if it is free (no wait) and then runs `work`, freeing the
 * lock however it ends. `{ acquired: false }` when another session holds it.
 */
export async function withAdvisoryTryLock<T>(
  client: PoolClient,
  key: number,
  work: () => Promise<T>,
): Promise<{ acquired: true; value: T } | { acquired: false }> {
  const { rows } = await client.query<{ locked: boolean }>("SELECT pg_try_advisory_lock($1) AS locked", [
    key,
  ]);
  if (!rows[0]?.locked) return { acquired: false };
  try {
    return { acquired: true, value: await work() };
  } finally {
    await client.query("SELECT pg_advisory_unlock($1)", [key]);
  }
}

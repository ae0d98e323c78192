import type { Pool, PoolClient } from "pg";
import { isConnectionError } from "./retry.js";

/**
 * Runs `work` in one transaction on one pooled connection: committed if it returns, rolled back
 * if it throws (the error is re-thrown). A connection that failed is not given back to the pool.
 */
export async function inTransaction<T>(pool: Pool, work: (client: PoolClient) => Promise<T>): Promise<T> {
  const client = await pool.connect();
  let broken: Error | undefined;
  try {
    await client.query("BEGIN");
    const result = await work(client);
    await client.query("COMMIT");
    return result;
  } catch (error) {
    await client.query("ROLLBACK").catch(() => {});
    if (isConnectionError(error)) broken = error as Error;
    throw error;
  } finally {
    client.release(broken);
  }
}

import type { ClientBase } from "pg";

/** The server process serving this statement (PostgreSQL's, not a pooler's). */
export async function selectBackendPid(client: ClientBase): Promise<number> {
  const { rows } = await client.query<{ pid: number }>("SELECT pg_backend_pid() AS pid");
  return Number(rows[0]?.pid);
}

/** Opens a transaction: in transaction pooling it holds one server connection until it ends. */
export async function beginTransaction(client: ClientBase): Promise<void> {
  await client.query("BEGIN");
}

export async function rollbackTransaction(client: ClientBase): Promise<void> {
  await client.query("ROLLBACK");
}

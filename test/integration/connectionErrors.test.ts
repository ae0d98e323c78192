import { expect, it } from "vitest";
import { harnessSuite } from "../helpers/harness.js";

/**
 * A pooled connection that the server ends while it is checked out and between two queries (a
 * transaction's client, Agenda's LISTEN client during its set-up) emits 'error' on the client,
 * where the pool does not listen: the scheduler's pool must not let that end the process.
 */

const suite = harnessSuite();

it("a checked-out connection ended by the server between queries does not crash the process", async () => {
  await suite.start([{ name: "conn-x", handler: async () => {} }], [{ name: "conn-x", cron: "0 0 1 1 *" }]);
  const pool = suite.db().pool;
  const client = await pool.connect();
  try {
    const { rows } = await client.query<{ pid: number }>("SELECT pg_backend_pid() AS pid");
    const ended = new Promise((resolve) => client.once("end", resolve));
    await pool.query("SELECT pg_terminate_backend($1)", [rows[0]?.pid]);
    await ended;
    // the next query on it fails as an ordinary error, which its caller handles
    await expect(client.query("SELECT 1")).rejects.toThrow();
  } finally {
    client.release(true);
  }
  // the pool goes on with fresh connections
  expect((await pool.query("SELECT 1 AS one")).rows[0]?.one).toBe(1);
});

import type { Pool, PoolClient } from "pg";
import { CronwardenError } from "../core/errors.js";
import { beginTransaction, rollbackTransaction, selectBackendPid } from "./sql/pooler.js";

/**
 * What cronwarden needs from its connections: **session** semantics. The instance's liveness
 * lock (src/engine/liveness.ts), the reconcile, schema and retention locks
 * (src/db/advisoryLock.ts) are session-level advisory locks, and the job notifications
 * (src/engine/notificationChannel.ts) are a LISTEN: all are state of a server session that must
 * survive from one statement to the next on the same connection. PostgreSQL and a pooler in
 * session mode (PgBouncer `pool_mode = session`) keep it; a pooler in transaction or statement
 * mode hands each transaction or statement to any server connection, so a lock taken by one
 * statement is held by a connection another client gets next, and a LISTEN hears nothing.
 * cronwarden would then half-work (two reconciles at once, live instances taken for dead), so it
 * refuses to start instead (`POOLER_MODE_UNSUPPORTED`, docs/locks-and-failover.md "Poolers").
 *
 * The probe: no statement tells a client the pool mode (PgBouncer's `SHOW` is on its admin
 * console only), so it observes the one property it relies on. Client A reads its server process
 * id; client B opens a transaction and reads its own; A reads its id again while B's transaction
 * holds B's server. In session mode A's two ids are equal and B's differs: each client owns its
 * server for the whole session. In transaction mode the server A used is free between A's
 * statements: B is handed it (PgBouncer reuses the server released last, its default
 * `server_round_robin = 0`), or A's next statement runs on another one. Statement mode refuses
 * the `BEGIN` outright. The probe runs PROBE_ROUNDS times, so a server handed elsewhere by
 * concurrent traffic in one round does not hide the mode.
 */

/** Rounds of the probe; any one that sees another server is proof. */
export const PROBE_ROUNDS = 3;

export type PoolingMode = "session" | "transaction" | "statement";

/** One round's observations: A's server before and after, B's server (in its open transaction). */
export interface PoolingRound {
  aBefore: number;
  b: number;
  aAfter: number;
}

/** The mode the rounds prove: any round where A's server changed, or B got A's, is not session pooling. */
export function poolingModeOf(rounds: PoolingRound[]): "session" | "transaction" {
  return rounds.some((round) => round.aBefore !== round.aAfter || round.b === round.aBefore)
    ? "transaction"
    : "session";
}

/** Observes the pool's connections (two clients, PROBE_ROUNDS rounds) and returns the pooling mode. */
export async function detectPoolingMode(pool: Pool): Promise<PoolingMode> {
  const a = await pool.connect();
  let b: PoolClient | undefined;
  try {
    b = await pool.connect();
    const rounds: PoolingRound[] = [];
    for (let round = 0; round < PROBE_ROUNDS; round++) {
      const aBefore = await selectBackendPid(a);
      try {
        await beginTransaction(b);
      } catch (error) {
        if (/statement pooling/i.test(String((error as Error).message))) return "statement";
        throw error;
      }
      try {
        const bPid = await selectBackendPid(b);
        rounds.push({ aBefore, b: bPid, aAfter: await selectBackendPid(a) });
      } finally {
        await rollbackTransaction(b);
      }
    }
    return poolingModeOf(rounds);
  } finally {
    a.release();
    b?.release();
  }
}

/** Refuses a pool that does not keep sessions, naming the mode and the fix. */
export async function requireSessionPooling(pool: Pool): Promise<void> {
  const mode = await detectPoolingMode(pool);
  if (mode === "session") return;
  throw new CronwardenError(
    "POOLER_MODE_UNSUPPORTED",
    `the database connection goes through a pooler in ${mode} pooling mode (PgBouncer pool_mode = ${mode}): cronwarden's liveness lock, reconcile and schema locks and job notifications (LISTEN) are session state that ${mode} pooling does not keep, so it will not start; fix: point DATABASE_URL (the pool) at PostgreSQL itself or at a pooler in session mode (PgBouncer pool_mode = session, e.g. a second [databases] entry with pool_mode=session); see docs/locks-and-failover.md, "Poolers"`,
  );
}

import type { Pool } from "pg";
import type { Logger } from "../core/logger.js";

/** How long the service waits for its pool's connections to close once the scheduler stopped. */
export const POOL_END_WAIT_MS = 5_000;

/**
 * Ends the service's pool, waiting at most `waitMs`. pg's `pool.end()` waits for every client
 * checked out of the pool to come back, however long that takes: one that never does (a bug,
 * such as the LISTEN client src/engine/notificationChannel.ts once kept) would hold the process
 * and the embedded PostgreSQL after it. Past the wait the service logs what is still out and
 * goes on with its shutdown.
 */
export async function endPool(pool: Pool, logger: Logger, waitMs = POOL_END_WAIT_MS): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<"late">((resolve) => {
    timer = setTimeout(() => resolve("late"), waitMs);
  });
  const outcome = await Promise.race([pool.end().then(() => "ended" as const), late]);
  clearTimeout(timer);
  if (outcome === "late") {
    const checkedOut = pool.totalCount - pool.idleCount;
    logger.error(
      { checkedOut, waitedMs: waitMs },
      `${checkedOut} database connection(s) still in use ${waitMs} ms after the scheduler stopped (a cronwarden bug: please report it); shutting down without waiting for them`,
    );
  }
}

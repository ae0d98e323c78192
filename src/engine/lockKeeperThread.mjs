// The lock keeper's thread (src/engine/lockKeeper.ts starts it and documents the protocol). Plain
// JavaScript: it runs as a worker_threads entry under plain Node, from src/ and from dist/ alike.
//
// It renews the locks of this instance's running jobs on its own connection, so that a handler
// that keeps the main thread busy cannot make its instance look dead. Each renewal is the fenced
// compare-and-set the main thread used to make (workerData.renewSql, src/engine/sql/claim.ts):
// "0 rows" means another instance holds the lock now, and the answer names it. A renewal that keeps
// failing (database unreachable) past the lock lifetime counts as lost too.
import { parentPort, workerData } from "node:worker_threads";
import pg from "pg";

const { connection, renewSql, renewEveryMs, lockLifetimeMs } = workerData;
const pool = new pg.Pool({ ...connection, max: 2, idleTimeoutMillis: 0, allowExitOnIdle: true });
// a connection that dies (server restart, network) is an 'error' event: unhandled it would end the thread
pool.on("error", () => {});

/**
 * A job row's lock, or another table's (a backfill slot's: the watch message brings its `sql` and
 * key `params`, src/engine/lockKeeper.ts RowLock).
 * @type {Map<number, {sql: string, params: unknown[], lockedAt: number, lastRenewal: number, offsetMs: number, timer?: NodeJS.Timeout, inFlight?: Promise<void>, lost?: object}>}
 */
const watched = new Map();

const post = (message) => parentPort.postMessage(message);

/** `loss`: `{ found }` (the row's holder now, null when the row is gone) or `{ reason }` (renewals failing). */
function lose(id, lock, loss) {
  if (lock.lost !== undefined) return;
  lock.lost = loss;
  clearTimeout(lock.timer);
  post({ type: "lost", id, loss });
}

async function renew(id, lock) {
  if (lock.lost !== undefined) return;
  const next = Date.now() + lock.offsetMs;
  try {
    const { rows } = await pool.query(lock.sql, [...lock.params, new Date(lock.lockedAt), new Date(next)]);
    const row = rows[0];
    if (row?.renewed) {
      lock.lockedAt = next;
      lock.lastRenewal = next;
      post({ type: "renewed", id, lockedAt: next });
      return;
    }
    // the main thread words it (src/engine/sql/claim.ts lockTakenReason)
    lose(id, lock, { found: row ? { holder: row.holder, heldAt: row.held_at?.getTime() ?? null } : null });
  } catch (error) {
    const silentFor = Date.now() + lock.offsetMs - lock.lastRenewal;
    const message = error instanceof Error ? error.message : String(error);
    if (silentFor >= lockLifetimeMs)
      lose(id, lock, {
        reason: `the lock could not be renewed for ${Math.round(silentFor / 1000)} s: ${message}`,
      });
    else post({ type: "retrying", id, message });
  }
}

/** The next renewal `delayMs` from now, and each one after it `renewEveryMs` after the last ended. */
function schedule(id, lock, delayMs) {
  lock.timer = setTimeout(() => {
    lock.inFlight = renew(id, lock).finally(() => {
      lock.inFlight = undefined;
      if (lock.lost === undefined && watched.get(id) === lock) schedule(id, lock, renewEveryMs);
    });
  }, delayMs);
}

/**
 * Stops renewing and answers with the lock time really in the row, for the caller's fenced final
 * save. A lock whose renewal is overdue by the lock's own time (the whole process was stopped, e.g.
 * SIGSTOP or a paused VM: this thread was frozen too, maybe before it saw the watch) is confirmed by
 * one more renewal first, so that a run whose lock was taken meanwhile learns it before its outcome
 * is recorded. A run shorter than the renewal interval costs no statement here.
 */
async function unwatch(id) {
  const lock = watched.get(id);
  if (!lock) return post({ type: "unwatched", id });
  watched.delete(id);
  clearTimeout(lock.timer);
  await lock.inFlight;
  if (lock.lost === undefined && Date.now() + lock.offsetMs - lock.lastRenewal > renewEveryMs)
    await renew(id, lock);
  post({ type: "unwatched", id, lockedAt: lock.lockedAt, lost: lock.lost !== undefined });
}

parentPort.on("message", (message) => {
  switch (message.type) {
    case "watch": {
      const lock = {
        sql: message.sql ?? renewSql,
        params: message.params ?? [message.jobId],
        lockedAt: message.lockedAt,
        lastRenewal: message.lockedAt,
        offsetMs: message.offsetMs,
      };
      watched.set(message.id, lock);
      // due a renewal interval after the lock was written, not after this thread saw it
      schedule(message.id, lock, Math.max(0, lock.lastRenewal + renewEveryMs - (Date.now() + lock.offsetMs)));
      return;
    }
    case "unwatch":
      void unwatch(message.id);
      return;
    case "stop":
      for (const lock of watched.values()) clearTimeout(lock.timer);
      watched.clear();
      void pool.end().finally(() => post({ type: "stopped" }));
      return;
  }
});
post({ type: "ready" });

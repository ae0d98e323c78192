import pg, { type Pool } from "pg";
import type { RunRecord, Scheduler } from "../../src/index.js";
import { pollUntil } from "./poll.js";

/**
 * Disables a task if its row is still pre-locked for `slot`: locked, and the save that starts the
 * run (src/engine/sql/save.ts, which moves `next_run_at` on and sets `last_run_at` to the start)
 * has not happened. One statement, so there is no gap: if the start save came first, nothing
 * changes; if it comes later, it waits for this row lock and then reads `disabled = true` back.
 */
const DISABLE_IF_NOT_STARTED = `UPDATE agenda_jobs SET disabled = true
  WHERE name = $1 AND disabled = false AND locked_at IS NOT NULL AND next_run_at = $2
    AND (last_run_at IS NULL OR last_run_at < $2)
  RETURNING id`;

export const SKIPPED_DETAIL = "the task was disabled after this slot was locked";

/**
 * Makes the engine skip a pre-locked slot of a task: when the engine locks the task's next slot
 * ahead of time (the scheduler's `slot:locked` event), the task is disabled in the same breath,
 * fenced on the row still being unstarted (DISABLE_IF_NOT_STARTED); the engine then starts the
 * slot, reads the disable back and writes the skipped run record. Resolves with that record.
 *
 * A row that is merely running (locked, its next slot ahead) is never taken for a pre-locked one.
 * The only way an attempt misses is a lock taken so close to its slot that the run started before
 * the disable landed; then the slot runs normally and the next slot's lock is used (the outcome of
 * every attempt is decided by the database, not by a timing guess). Leaves the task disabled.
 * Fails if the engine ran or recorded the slot as anything but skipped.
 */
export async function skipAPreLockedSlot(
  pool: Pool,
  scheduler: Scheduler,
  taskName: string,
  { attempts = 8, lockTimeoutMs = 20_000 } = {},
): Promise<RunRecord> {
  // a connection of its own, outside the scheduler's pool: the disable goes out as soon as the lock is seen
  const { connectionString } = pool.options;
  if (!connectionString) throw new Error("skipAPreLockedSlot needs a pool made from a connection string");
  const client = new pg.Client({ connectionString });
  client.on("error", () => {});
  await client.connect();
  try {
    for (let attempt = 1; attempt <= attempts; attempt++) {
      const slot = await nextPreLock(scheduler, taskName, lockTimeoutMs);
      const disabled = await client.query(DISABLE_IF_NOT_STARTED, [taskName, slot]);
      if (disabled.rowCount === 1) return await skippedRecord(pool, scheduler, taskName, slot);
    }
  } finally {
    await client.end();
  }
  throw new Error(
    `${taskName}: the run started before the disable could land in ${attempts} pre-locks in a row (each lock came too close to its slot)`,
  );
}

/** The slot of the next lock the engine takes of `taskName` ahead of its time. */
function nextPreLock(scheduler: Scheduler, taskName: string, timeoutMs: number): Promise<Date> {
  return new Promise((resolve, reject) => {
    const listener = ({ taskName: locked, scheduledAt }: { taskName: string; scheduledAt: Date }) => {
      if (locked !== taskName || scheduledAt.getTime() <= Date.now()) return;
      clearTimeout(timer);
      scheduler.off("slot:locked", listener);
      resolve(scheduledAt);
    };
    const timer = setTimeout(() => {
      scheduler.off("slot:locked", listener);
      reject(
        new Error(`timed out after ${timeoutMs} ms waiting for the engine to pre-lock a slot of ${taskName}`),
      );
    }, timeoutMs);
    scheduler.on("slot:locked", listener);
  });
}

/** The engine's record of `slot`, which must be a skip (the handler not called). */
async function skippedRecord(
  pool: Pool,
  scheduler: Scheduler,
  taskName: string,
  slot: Date,
): Promise<RunRecord> {
  const found = await pollUntil(
    `the run record of ${taskName}'s pre-locked slot ${slot.toISOString()}`,
    async () => {
      const record = (await scheduler.runs(taskName, 10)).find(
        (run) => run.scheduledAt.getTime() === slot.getTime(),
      );
      if (record) return { record };
      // a lock given up without a run: nothing would ever record the slot; say so rather than time out
      const row = (
        await pool.query("SELECT locked_at, next_run_at FROM agenda_jobs WHERE name = $1", [taskName])
      ).rows[0];
      const released = row?.locked_at === null && row.next_run_at?.getTime() === slot.getTime();
      return released && Date.now() > slot.getTime() + 5_000 ? { record: undefined } : undefined;
    },
  );
  const record = found.record;
  if (!record)
    throw new Error(`${taskName}: the pre-lock of slot ${slot.toISOString()} was released without a run`);
  if (record.outcome !== "skipped" || record.detail !== SKIPPED_DETAIL)
    throw new Error(
      `${taskName}: the pre-locked slot ${slot.toISOString()} of the task disabled before it started was recorded ${record.outcome} (${record.detail ?? "no detail"}), not skipped`,
    );
  return record;
}

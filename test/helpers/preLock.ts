import type { Pool } from "pg";
import type { RunRecord, Scheduler } from "../../src/index.js";
import { pollUntil } from "./poll.js";

/**
 * Makes a task skip a pre-locked slot: waits until Agenda has locked the task's next slot ahead of
 * time, disables the task, and resolves with the run record of the skipped slot. A lock taken a
 * little further ahead than one poll is freed again by Agenda's queue ("too far away"); then there
 * is no pre-locked run to skip, so the task is enabled again, its overdue slot runs, and the next
 * slot is tried (up to 5 times). Leaves the task disabled.
 */
export async function skipAPreLockedSlot(
  pool: Pool,
  scheduler: Scheduler,
  taskName: string,
  onFreed: () => Promise<void> = async () => {},
): Promise<RunRecord> {
  const row = async () => (await pool.query("SELECT * FROM agenda_jobs WHERE name = $1", [taskName])).rows[0];
  for (let attempt = 1; ; attempt++) {
    const locked = await pollUntil(
      `${taskName}'s slot to be pre-locked`,
      async () => {
        const current = await row();
        return current.locked_at !== null && current.next_run_at > new Date() && current;
      },
      { intervalMs: 10, timeoutMs: 15_000 },
    );
    await pool.query("UPDATE agenda_jobs SET disabled = true WHERE name = $1", [taskName]);
    const fate = await pollUntil(`the skipped record of ${taskName}, or the pre-lock freed`, async () => {
      const skipped = (await scheduler.runs(taskName, 5)).find(
        (run) => run.scheduledAt.getTime() === locked.next_run_at.getTime(),
      );
      if (skipped) return { skipped };
      const current = await row();
      const freed =
        current.locked_at === null && current.next_run_at.getTime() === locked.next_run_at.getTime();
      return freed && Date.now() > locked.next_run_at.getTime() + 1000 ? { skipped: undefined } : undefined;
    });
    if (fate.skipped) return fate.skipped;
    if (attempt >= 5)
      throw new Error(`the pre-lock of ${taskName} was freed before its slot 5 times in a row`);
    await pool.query("UPDATE agenda_jobs SET disabled = false WHERE name = $1", [taskName]);
    await onFreed();
  }
}

import type { Agenda } from "agenda";
import type { Pool } from "pg";
import type { Clock } from "../core/clock.js";
import { nextSlot, scheduleOf } from "../core/policies/schedule.js";
import type { WakeJob } from "./jobWrites.js";
import * as batches from "./sql/jobBatches.js";

/** Rows per statement: a statement's arrays stay a few hundred kB. */
const ROWS_PER_STATEMENT = 2_000;

export interface BatchWritesDeps {
  pool: Pool;
  agenda: Agenda;
  /** Agenda's `lastModifiedBy` of a save (its name: the instance id). */
  instanceId: string;
  clock: Clock;
  wake(job: WakeJob): Promise<void>;
}

export interface NewJob {
  name: string;
  cron: string;
  timezone: string;
  enabled: boolean;
}

/**
 * The reconciler's writes of many rows (src/reconcile/batchApply.ts): the rows JobWrites.createJob,
 * updateSchedule and setEnabled write one at a time, in one statement per batch. A task these
 * cannot write alike (a one-shot, a cron whose next slot only Agenda computes, a run that started
 * meanwhile) is answered as not written, and the caller writes it alone.
 */
export class JobBatchWrites {
  readonly #deps: BatchWritesDeps;

  constructor(deps: BatchWritesDeps) {
    this.#deps = deps;
  }

  /**
   * Creates the repeating `single` jobs of plain cron tasks (first run: the next slot after
   * now), as createJob does; one job notification per batch instead of one per row (any
   * notification makes each instance claim, src/engine/engineWiring.ts). Returns the names written.
   */
  async createJobs(jobs: readonly NewJob[]): Promise<Set<string>> {
    const next = slotsAfter(new Date(this.#deps.clock.now()));
    const rows: batches.NewJobRow[] = [];
    for (const job of jobs) {
      const nextRunAt = next(job.cron, job.timezone);
      if (!nextRunAt) continue;
      const priority = this.#deps.agenda.definitions[job.name]?.priority ?? 0;
      rows.push({ ...job, priority, nextRunAt, disabled: !job.enabled });
    }
    const written = new Set<string>();
    for (let from = 0; from < rows.length; from += ROWS_PER_STATEMENT) {
      const saved = await batches.insertSingleJobs(
        this.#deps.pool,
        rows.slice(from, from + ROWS_PER_STATEMENT),
        this.#deps.instanceId,
      );
      for (const row of saved) written.add(row.name);
      const first = saved.reduce<(typeof saved)[number] | undefined>(
        (soonest, row) => (!soonest || row.next_run_at < soonest.next_run_at ? row : soonest),
        undefined,
      );
      if (first)
        await this.#deps
          .wake({ id: first.id, name: first.name, nextRunAt: first.next_run_at, priority: first.priority })
          .catch(() => {});
    }
    return written;
  }

  /**
   * Re-times cron tasks in place from `now`, as updateSchedule does: returns each name written
   * with its next run. A name left out was not written (see the class comment).
   */
  async updateSchedules(changes: readonly Omit<NewJob, "enabled">[], now: Date): Promise<Map<string, Date>> {
    const next = slotsAfter(now);
    const rows: batches.ScheduleChange[] = [];
    for (const change of changes) {
      const nextRunAt = next(change.cron, change.timezone);
      if (nextRunAt)
        rows.push({ name: change.name, cron: change.cron, timezone: change.timezone, nextRunAt });
    }
    const written = new Map<string, Date>();
    for (let from = 0; from < rows.length; from += ROWS_PER_STATEMENT) {
      const batch = rows.slice(from, from + ROWS_PER_STATEMENT);
      const names = await batches.updateSchedules(this.#deps.pool, batch, now);
      for (const row of batch) if (names.has(row.name)) written.set(row.name, row.nextRunAt);
    }
    return written;
  }

  /** Enables or disables rows, as setEnabled does (a row that is gone is not an error there either). */
  async setEnabledMany(changes: readonly { name: string; enabled: boolean }[]): Promise<void> {
    for (let from = 0; from < changes.length; from += ROWS_PER_STATEMENT) {
      await batches.setDisabledMany(
        this.#deps.pool,
        changes.slice(from, from + ROWS_PER_STATEMENT).map((change) => ({
          name: change.name,
          disabled: !change.enabled,
        })),
      );
    }
  }
}

/**
 * The next slot after `after` of a repeating cron (src/core/policies/schedule.ts nextSlot, as
 * jobWrites.ts repeatFrom computes it), once per cron and timezone: tasks sharing a schedule
 * share the answer. Undefined for a one-shot and for a cron nextSlot has no answer for.
 */
function slotsAfter(after: Date): (cron: string, timezone: string) => Date | undefined {
  const known = new Map<string, Date | undefined>();
  return (cron, timezone) => {
    const key = `${timezone}\n${cron}`;
    if (known.has(key)) return known.get(key);
    let next: Date | undefined;
    try {
      if (scheduleOf(cron).kind !== "at") {
        const slot = nextSlot(cron, timezone, after.getTime());
        next = slot === undefined ? undefined : new Date(slot);
      }
    } catch {
      next = undefined;
    }
    known.set(key, next);
    return next;
  };
}

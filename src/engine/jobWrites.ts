import type { Agenda, Job } from "agenda";
import type { Pool, PoolClient } from "pg";
import type { Clock } from "../core/clock.js";
import type { Calendar } from "../core/policies/calendar.js";
import type { CatchUpPolicy } from "../core/policies/catchUp.js";
import { POLICY_DATA_KEY } from "../core/policies/catchUpAtStart.js";
import { dueAt } from "../core/policies/jitter.js";
import type { OverlapPolicy } from "../core/policies/overlap.js";
import { type PauseMark, pauseOfValue } from "../core/policies/pauseOnFailure.js";
import { nextSlot, rowSchedule, scheduleOf } from "../core/policies/schedule.js";
import { withAdvisoryTryLock } from "../db/advisoryLock.js";
import type { DependencySpec, TaskDependencies } from "./engineApi.js";
import * as sql from "./sql.js";

/** Another instance's reconcile holds the lock: asked again after this, doubling up to the max. */
const RECONCILE_LOCK_RETRY_MS = 25;
const RECONCILE_LOCK_RETRY_MAX_MS = 250;

/** A job to wake the instances for (PostgreSQL NOTIFY), as the engine's `wake` takes it. */
export interface WakeJob {
  id: string;
  name: string;
  nextRunAt: Date | null;
  priority: number;
}

export interface JobWritesDeps {
  pool: Pool;
  agenda: Agenda;
  dependencies: TaskDependencies;
  instanceId: string;
  clock: Clock;
  wake(job: WakeJob): Promise<void>;
}

/**
 * The writes that make job rows follow the desired state (the reconciler's) and the operator's
 * requests (run now, resume): each in place, in one statement or one transaction, on the same row
 * and lock a task always has. Nothing here runs a job.
 */
export class JobWrites {
  readonly #deps: JobWritesDeps;

  constructor(deps: JobWritesDeps) {
    this.#deps = deps;
  }

  /**
   * Creates the repeating `single` job of a task; its first run is the next slot after now. A
   * downstream's job (`after`) has no schedule: its runs are queued by its upstreams.
   */
  async createJob(
    taskName: string,
    cron: string,
    timezone: string,
    enabled: boolean,
    after?: DependencySpec,
  ): Promise<void> {
    const agenda = this.#deps.agenda;
    const job = after ? agenda.create(taskName, { after }) : agenda.create(taskName);
    job.attrs.type = "single";
    if (after) job.attrs.nextRunAt = null;
    else {
      const schedule = scheduleOf(cron);
      if (schedule.kind === "at") {
        // a one-shot: no repeat interval, so Agenda runs it once and leaves no next run
        job.attrs.nextRunAt = new Date(schedule.at);
        job.attrs.repeatTimezone = timezone;
        (job.attrs as { data: unknown }).data = {
          [POLICY_DATA_KEY]: { at: new Date(schedule.at).toISOString() },
        };
        if (!enabled) job.disable();
        await job.save();
        return;
      }
      repeatFrom(job, cron, timezone, new Date(this.#deps.clock.now()));
    }
    if (!enabled) job.disable();
    await job.save();
    if (after) await this.setDependency(taskName, after); // a row that existed already is converted too
  }

  /** Makes a task's row a downstream with `after`, or a plain row again (null); see DependencyCoordinator. */
  async setDependency(taskName: string, after: DependencySpec | null): Promise<void> {
    await this.#deps.dependencies.setDependency(taskName, after);
  }

  /**
   * Changes cron and timezone in place (same row, lock and history). The next run is computed
   * from `now` in the new timezone, by Agenda's own algorithm, and written with the schedule in
   * one statement. Not `repeatEvery()` + `save()`: that computes from the last run (a time that
   * can be past, firing at once) and `save()` clears the failure fields. A run that started after
   * `now` moves the reference to its start: its slot is not the next one (src/engine/sql/jobs.ts
   * updateSchedule).
   */
  async updateSchedule(taskName: string, cron: string, timezone: string, now: Date): Promise<Date> {
    let reference = now;
    const schedule = scheduleOf(cron);
    if (schedule.kind === "at") {
      // (re-)arms a one-shot: it runs once more, at its new time
      const at = new Date(schedule.at);
      await sql.armOneShot(this.#deps.pool, { name: taskName, timezone, at });
      return at;
    }
    for (let attempt = 1; ; attempt++) {
      const probe = this.#deps.agenda.create(taskName);
      probe.attrs.lastRunAt = reference; // the reference Agenda's computation starts from
      repeatFrom(probe, cron, timezone, reference);
      const nextRunAt = probe.attrs.nextRunAt;
      if (!nextRunAt)
        throw new Error(`cron "${cron}" in ${timezone} has no next run after ${reference.toISOString()}`);
      const result = await sql.updateSchedule(this.#deps.pool, {
        name: taskName,
        cron,
        timezone,
        nextRunAt,
        reference,
      });
      if (result.updated || !result.exists) return nextRunAt;
      if (attempt >= 5 || !result.startedAt)
        throw new Error(`the schedule of "${taskName}" could not be changed: runs kept starting meanwhile`);
      reference = new Date(Math.max(result.startedAt.getTime(), reference.getTime()));
    }
  }

  async setPolicy(taskName: string, catchUp: CatchUpPolicy): Promise<void> {
    await sql.setPolicy(this.#deps.pool, taskName, { catchUp });
  }

  /**
   * Stores a task's jitter; an idle job whose next run is ahead is re-timed to its next slot plus
   * the new offset (a running or pre-locked one takes it from its next start save).
   */
  async setJitter(taskName: string, jitterMs: number, now: Date): Promise<void> {
    await sql.setPolicy(this.#deps.pool, taskName, { jitterMs });
    const [row] = await sql.selectTaskJobs(this.#deps.pool, [taskName]);
    const schedule = row ? rowSchedule(row.repeat_interval, row.policy) : null;
    if (!row || !schedule || row.locked_at || !row.next_run_at || row.next_run_at <= now) return;
    const slot = nextSlot(schedule, row.repeat_timezone ?? "UTC", now.getTime());
    if (slot === undefined) return;
    await sql.retimeIdle(
      this.#deps.pool,
      taskName,
      row.next_run_at,
      new Date(dueAt(taskName, slot, jitterMs)),
    );
  }

  async setOverlap(taskName: string, overlap: OverlapPolicy): Promise<void> {
    await sql.setPolicy(this.#deps.pool, taskName, { overlap });
  }

  /** Stores the calendars whose slots a task skips (docs/calendars.md; empty: none), read by each run. */
  async setExclude(taskName: string, calendars: Calendar[]): Promise<void> {
    await sql.setPolicy(this.#deps.pool, taskName, { exclude: calendars });
  }

  async setEnabled(taskName: string, enabled: boolean): Promise<void> {
    await sql.setDisabled(this.#deps.pool, taskName, !enabled);
  }

  /** Stores a task's pauseOnFailure (null: never pauses) in its job row (read by each slot's end). */
  async setPauseOnFailure(taskName: string, pauseOnFailure: number | null): Promise<void> {
    await sql.setPolicy(this.#deps.pool, taskName, { pauseOnFailure });
  }

  /**
   * Clears a pause by failure: the task is enabled again (or stays disabled: `enabled` false) and
   * its failure streak starts over; like an enable, its next run follows catchUp at its start.
   * `record` runs in the same transaction once a pause was cleared (the audit row). "not-paused"
   * when the task has a job that is not paused, "missing" when it has none.
   */
  async resume(
    taskName: string,
    enabled: boolean,
    record?: (db: PoolClient, pause: PauseMark) => Promise<void>,
  ): Promise<
    { status: "resumed"; pause: PauseMark; nextRunAt: Date | null } | { status: "not-paused" | "missing" }
  > {
    const { cleared, pause } = await sql.inTransaction(this.#deps.pool, async (client) => {
      const row = await sql.clearPause(client, taskName, enabled);
      const mark = row ? (pauseOfValue(row.paused) ?? undefined) : undefined;
      if (row && mark) await record?.(client, mark);
      return { cleared: row, pause: mark };
    });
    if (cleared && pause) {
      if (enabled && cleared.next_run_at)
        await this.#deps
          .wake({
            id: cleared.id,
            name: taskName,
            nextRunAt: cleared.next_run_at,
            priority: 0,
          })
          .catch(() => {});
      return { status: "resumed", pause, nextRunAt: cleared.next_run_at };
    }
    const flags = await sql.selectJobFlags(this.#deps.pool, taskName);
    return { status: flags ? "not-paused" : "missing" };
  }

  /**
   * Asks for a run now; refused while a run holds the lock or the task is disabled. `record`
   * runs in the same transaction as the request, once it is accepted (the audit row): both are
   * written or neither.
   */
  async requestRun(
    taskName: string,
    requestedBy: string,
    record?: (db: PoolClient) => Promise<void>,
    options: { withDownstream?: boolean } = {},
  ): Promise<"queued" | "running" | "disabled" | "missing"> {
    const queued = await sql.inTransaction(this.#deps.pool, async (client) => {
      const request = await sql.requestManualRun(client, taskName, {
        by: requestedBy,
        instance: this.#deps.instanceId,
        withDownstream: options.withDownstream === true,
      });
      if (request) await record?.(client);
      return request;
    });
    if (queued) {
      await this.#deps.wake({ id: queued.id, name: taskName, nextRunAt: queued.next_run_at, priority: 0 });
      return "queued";
    }
    const flags = await sql.selectJobFlags(this.#deps.pool, taskName);
    if (!flags) return "missing";
    return flags.disabled ? "disabled" : "running";
  }
}

/**
 * Runs `work` while holding a database-wide lock, so instances reconcile one at a time. Waits
 * without holding a connection: the holder's work takes more connections from the pool, and
 * reconciles waiting on connections of the same pool (several schedulers on one pool, or a config
 * change, a repair and an anti-entropy pass at once) could leave it none.
 */
export async function withReconcileLock<T>(pool: Pool, work: () => Promise<T>, clock: Clock): Promise<T> {
  for (let attempt = 0; ; attempt++) {
    const client = await pool.connect();
    let outcome: { acquired: true; value: T } | { acquired: false };
    try {
      outcome = await withAdvisoryTryLock(client, sql.RECONCILE_LOCK_KEY, work);
    } finally {
      client.release();
    }
    if (outcome.acquired) return outcome.value;
    await clock.sleep(Math.min(RECONCILE_LOCK_RETRY_MS * 2 ** attempt, RECONCILE_LOCK_RETRY_MAX_MS));
  }
}

/**
 * What Agenda's `repeatEvery()` sets (the interval and timezone), with the next run: the next slot
 * after `after` (nextSlotAfter), and Agenda's own computation only when there is none.
 * `repeatEvery()` always computes Agenda's, which was then overwritten: for 10,000 new jobs that
 * was about half a gigabyte of cron-parser and luxon garbage, most of a large start's memory peak
 * (docs/design.md, "Memory").
 */
function repeatFrom(job: Job, cron: string, timezone: string, after: Date): void {
  const next = nextSlotAfter(cron, timezone, after);
  if (!next) {
    job.repeatEvery(cron, { timezone });
    return;
  }
  job.attrs.repeatInterval = cron;
  job.attrs.repeatTimezone = timezone;
  job.attrs.nextRunAt = next;
}

/** The next slot (DST rule, or an epoch-anchored interval: src/core/policies/schedule.ts); undefined: Agenda's stands. */
function nextSlotAfter(cron: string, timezone: string, after: Date): Date | undefined {
  try {
    const next = nextSlot(cron, timezone, after.getTime());
    return next === undefined ? undefined : new Date(next);
  } catch {
    return undefined;
  }
}

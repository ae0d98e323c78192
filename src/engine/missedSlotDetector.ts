import type { Pool } from "pg";
import type { Clock } from "../core/clock.js";
import { type Logger, toError } from "../core/logger.js";
import { PeriodicTimer } from "../core/periodic.js";
import type { MissedSlot } from "./engineApi.js";
import {
  claimMissedSlotReport,
  type OverdueRow,
  releaseLock,
  selectOverdueJobs,
  textArrayLiteral,
} from "./sql.js";

export interface MissedSlotDetectorOptions {
  pool: Pool;
  /** The tasks this instance can run (registered); only their jobs are checked. */
  taskNames: () => string[];
  graceMs: number;
  lockLifetimeMs: number;
  checkEveryMs: number;
  /** The checks' shift against the poll (src/core/periodic.ts); default 0. */
  phaseMs?: number;
  /** The checks' timer (src/core/clock.ts). */
  clock: Clock;
  logger: Logger;
  onMissed: (missed: MissedSlot) => void;
  /** Makes the workers look at a job now (an overdue, unlocked job). */
  nudge: (row: OverdueRow) => Promise<void>;
  /** A job that lost its next run is re-timed by a reconcile. */
  repairLostNextRun: () => Promise<void>;
}

/**
 * Silent-stop detection. The hosted platform cronwarden replaces had tasks that "just stopped";
 * here every enabled task whose slot is more than `graceMs` past without a run starting is
 * reported once per slot across all instances (event, metric, alert, error log), whatever the cause: a lock nobody
 * renews, a lost next run, no live instance polling. Then it repairs what it can: releases a
 * dead lock, re-times a lost next run, and nudges the workers.
 */
export class MissedSlotDetector {
  readonly #options: MissedSlotDetectorOptions;
  #timer: PeriodicTimer | undefined;
  #checking: Promise<void> | undefined;
  /** The last names' array literal, kept while taskNames() answers the same array. */
  #namesLiteral: { names: readonly string[]; length: number; literal: string } | undefined;

  constructor(options: MissedSlotDetectorOptions) {
    this.#options = options;
  }

  start(): void {
    if (this.#timer || this.#options.checkEveryMs <= 0) return;
    this.#timer = new PeriodicTimer(
      this.#options.checkEveryMs,
      this.#options.phaseMs ?? 0,
      () => {
        this.#checking ??= this.check()
          .then(() => undefined)
          .catch((error: unknown) =>
            this.#options.logger.debug({ err: toError(error) }, "missed-slot check failed"),
          )
          .finally(() => {
            this.#checking = undefined;
          });
      },
      this.#options.clock,
    );
    this.#timer.start();
  }

  async stop(): Promise<void> {
    this.#timer?.stop();
    this.#timer = undefined;
    await this.#checking;
  }

  async check(): Promise<MissedSlot[]> {
    const { pool, taskNames, graceMs, lockLifetimeMs, logger } = this.#options;
    const names = taskNames();
    if (names.length === 0) return [];
    const cached = this.#namesLiteral;
    const literal =
      cached && cached.names === names && cached.length === names.length
        ? cached.literal
        : textArrayLiteral(names);
    this.#namesLiteral = { names, length: names.length, literal };
    const overdue = await selectOverdueJobs(pool, literal, graceMs, lockLifetimeMs);
    const missed: MissedSlot[] = [];
    let lostNextRun = false;
    for (const row of overdue) {
      const slot = row.next_run_at?.toISOString() ?? "none";
      const reason = describe(row, graceMs);
      if (await claimMissedSlotReport(pool, row.id, slot)) {
        const event = { taskName: row.name, scheduledAt: row.next_run_at, reason };
        missed.push(event);
        logger.error(
          { task: row.name, slot: row.next_run_at, reason },
          `missed slot: "${row.name}" ${reason}; repairing`,
        );
        this.#options.onMissed(event);
      }
      if (row.locked_at) await releaseLock(pool, row.id, row.locked_at);
      if (row.next_run_at === null) lostNextRun = true;
      else await this.#options.nudge(row);
    }
    if (lostNextRun) await this.#options.repairLostNextRun();
    return missed;
  }
}

function describe(row: OverdueRow, graceMs: number): string {
  if (row.next_run_at === null) return "has no next run (it would never run again)";
  const late = `its slot ${row.next_run_at.toISOString()} is more than ${Math.round(graceMs / 1000)} s past and no run started`;
  return row.locked_at
    ? `${late}; its lock from ${row.locked_at.toISOString()} is no longer renewed by anyone`
    : late;
}

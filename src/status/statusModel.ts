/** What the scheduler reports about its tasks: the reconciled view of desired and runtime state. */

import type { RunOutcome } from "../core/runTypes.js";

export interface TaskStatus {
  name: string;
  /** Registered in this instance's code. A job row of an unregistered task is listed with false. */
  registered: boolean;
  description: string | null;
  /** The desired state's entry in force for this task, if any. */
  configured: { enabled: boolean; cron: string; timezone: string } | null;
  /** Runtime state from the job row; null when the task has no job yet. */
  job: {
    enabled: boolean;
    cron: string | null;
    timezone: string | null;
    nextRunAt: Date | null;
    lastRunAt: Date | null;
    lastFinishedAt: Date | null;
  } | null;
  /** A run is in progress (on `runningOn`), not merely pre-locked. */
  running: boolean;
  runningOn: string | null;
  lastOutcome: RunOutcome | null;
  lastError: string | null;
  /**
   * Status figures count slots, all read from the run log in one statement: a slot's outcome is
   * its final attempt's (the run history lists every attempt). Failed slots since the last
   * succeeded one; skipped slots neither count nor break the streak.
   */
  consecutiveFailures: number;
  /** Outcomes of the last slots, newest first (up to 10). */
  recentOutcomes: RunOutcome[];
  /**
   * Task dependencies in force (the job rows, docs/dependencies.md): the tasks this one runs after
   * (with `when` and `waitAtMost`), and the tasks that run after it.
   */
  dependencies: TaskDependencies;
}

export interface TaskDependencies {
  upstreams: string[];
  downstreams: string[];
  when: string | null;
  waitAtMost: string | null;
}

export type RunNowResult =
  | { status: "queued"; taskName: string; requestedAt: Date; requestedBy: string }
  | { status: "unknown"; taskName: string; reason: string }
  | { status: "running"; taskName: string; reason: string }
  | { status: "disabled"; taskName: string; reason: string };

export interface Readiness {
  ready: boolean;
  database: boolean;
  desiredStateLoaded: boolean;
  workersStarted: boolean;
}

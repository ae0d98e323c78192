/** What the scheduler reports about its tasks: the reconciled view of desired and runtime state. */

import type { RunOutcome } from "../core/runTypes.js";

export interface TaskStatus {
  name: string;
  /** Registered in this instance's code. A job row of an unregistered task is listed with false. */
  registered: boolean;
  description: string | null;
  /** The desired state's entry in force for this task, if any. */
  configured: {
    enabled: boolean;
    cron: string;
    timezone: string;
    /** The entry's jitter ("30s"), if any. */
    jitter?: string;
    /** An `at:` entry's time (ISO); `cron` is then `at <time>`. */
    at?: string;
    /** An `every:` entry's interval as written ("15m"); `cron` is then how the job row stores it ("15 minutes"). */
    every?: string;
    /** The entry's catchUp policy, or the default (docs/behaviour.md). */
    catchUp?: { window: string; runs: string };
    /** The entry's pauseOnFailure, if any. */
    pauseOnFailure?: number;
    /** The calendars its `exclude` names (docs/calendars.md), if any. */
    exclude?: string[];
  } | null;
  /** Runtime state from the job row; null when the task has no job yet. */
  job: {
    enabled: boolean;
    cron: string | null;
    timezone: string | null;
    /** The catchUp policy stored in the job row, which the runs follow. */
    catchUp?: { window: string; runs: string };
    /** For an `at:` one-shot: it has run and has no next run (done, not failed or lost). */
    completed?: boolean;
    /** The pauseOnFailure stored in the row (absent: never pauses). */
    pauseOnFailure?: number;
    /** The calendars stored in the row, whose slots are skipped (docs/calendars.md), if any. */
    exclude?: string[];
    /** Set while the task is paused by failure (then `enabled` is false). */
    pausedByFailure?: PauseView;
    nextRunAt: Date | null;
    lastRunAt: Date | null;
    lastFinishedAt: Date | null;
  } | null;
  /**
   * `paused`: paused by failure (see job.pausedByFailure); `disabled`: disabled by the config (or
   * not in it); `enabled`; `no-job`: not created yet.
   */
  state: "enabled" | "disabled" | "paused" | "no-job";
  /** A run is in progress (on `runningOn`), not merely pre-locked. */
  running: boolean;
  runningOn: string | null;
  lastOutcome: RunOutcome | null;
  lastError: string | null;
  /**
   * Status figures count slots, all read from the run log (agenda_logs) in one statement: a slot's
   * outcome is its final attempt's (the run history lists every attempt). Failed slots since the
   * last succeeded one; skipped and interrupted slots neither count nor break the streak.
   */
  consecutiveFailures: number;
  /** In attempts, beside it: the attempts (retries included) of those failed slots. */
  consecutiveFailedAttempts: number;
  /** Final outcomes of the last slots, newest first (up to 10), one per slot. */
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

/** A task paused by failure, as the API shows it (docs/behaviour.md, "Pause on failure"). */
export interface PauseView {
  at: Date;
  /** Failed slots in a row that paused it. */
  failures: number;
  /** The slot whose failure paused it. */
  slot: Date | null;
  /** The last error's first line (redacted). */
  lastError: string | null;
}

export type ResumeResult =
  | { status: "resumed"; taskName: string; resumedBy: string; pause: PauseView; nextRunAt: Date | null }
  | { status: "unknown"; taskName: string; reason: string }
  | { status: "not-paused"; taskName: string; reason: string };

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
  /**
   * The namespace's pause-all switch while on (docs/operations.md, "Pause all"): since when; null
   * while off. Who and why are for token holders (GET /pause-all): probes answer without a token.
   */
  pausedAll?: { pausedAt: Date } | null;
}

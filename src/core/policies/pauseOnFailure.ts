import type { RunOutcome } from "../runTypes.js";

/**
 * Pause on failure (docs/behaviour.md, "Pause on failure"): after `pauseOnFailure` failed slots
 * in a row the task pauses itself (its job row is disabled and marked). Pure functions; the run's
 * final save applies them in one transaction with the save (src/engine/jobRepository.ts).
 */

/** The largest `pauseOnFailure` accepted. */
export const MAX_PAUSE_ON_FAILURE = 1_000;

/** Where the job row keeps the failed slots in a row and the pause mark (`data.<key>`). */
export const FAILURE_STREAK_KEY = "failureStreak";
export const PAUSE_DATA_KEY = "pausedByFailure";

/** The longest error summary kept in the pause mark. */
const SUMMARY_MAX = 300;

/** The pause mark in the job row: when, after how many failed slots, and the last error's first line. */
export interface PauseMark {
  at: Date;
  failures: number;
  /** The slot whose failure paused the task. */
  slot: Date | null;
  /** First line of the last error, redacted, at most 300 characters. */
  lastError: string | null;
}

/** What the final save of a slot reads in the row (under its lock) to decide. */
export interface PauseInput {
  /** The row's `data.policy.pauseOnFailure`; undefined: never pauses. */
  threshold: number | undefined;
  /** Failed slots in a row before this one (`data.failureStreak`). */
  streak: number;
  /** The slot's final outcome (after its retries). */
  outcome: RunOutcome;
  /** The row is already paused by failure. */
  paused: boolean;
  /** The row is disabled (by the config, or paused). */
  disabled: boolean;
}

export interface PauseDecision {
  /** The failed slots in a row after this one. */
  streak: number;
  /** This slot's end pauses the task (at most once: never when it is already paused or disabled). */
  pause: boolean;
}

/**
 * A failed slot adds one to the streak, a succeeded one resets it; skipped and interrupted slots
 * (catch-up, overlap, a hand-off at shutdown) neither count nor break it. The task pauses when the
 * streak reaches the threshold, unless it is already paused or disabled (a task the config
 * disabled during the run is not paused: nothing would be gained and nothing to alert about).
 */
export function decidePause(input: PauseInput): PauseDecision {
  const streak =
    input.outcome === "failed" ? input.streak + 1 : input.outcome === "succeeded" ? 0 : input.streak;
  const pause =
    input.outcome === "failed" &&
    input.threshold !== undefined &&
    streak >= input.threshold &&
    !input.paused &&
    !input.disabled;
  return { streak, pause };
}

/** A stored `pauseOnFailure`: a whole number from 1 to MAX_PAUSE_ON_FAILURE, else none. */
export function thresholdOf(value: unknown): number | undefined {
  return typeof value === "number" && Number.isInteger(value) && value >= 1 && value <= MAX_PAUSE_ON_FAILURE
    ? value
    : undefined;
}

/** The failed slots in a row a job row's data holds (0 when absent or unreadable). */
export function streakOfData(data: unknown): number {
  const value = recordOf(data)?.[FAILURE_STREAK_KEY];
  return typeof value === "number" && Number.isInteger(value) && value > 0 ? value : 0;
}

/** The pause mark a job row's data (or its `pausedByFailure` value) holds, if any. */
export function pauseOfData(data: unknown): PauseMark | undefined {
  return pauseOfValue(recordOf(data)?.[PAUSE_DATA_KEY]);
}

export function pauseOfValue(value: unknown): PauseMark | undefined {
  const mark = recordOf(value);
  if (!mark) return undefined;
  const at = typeof mark.at === "string" ? new Date(mark.at) : undefined;
  const slot = typeof mark.slot === "string" ? new Date(mark.slot) : null;
  return {
    at: at && !Number.isNaN(at.getTime()) ? at : new Date(0),
    failures: typeof mark.failures === "number" ? mark.failures : 0,
    slot: slot && !Number.isNaN(slot.getTime()) ? slot : null,
    lastError: typeof mark.lastError === "string" ? mark.lastError : null,
  };
}

/** The pause mark as stored in the row (JSON). */
export function storedPause(mark: PauseMark): Record<string, string | number | null> {
  return {
    at: mark.at.toISOString(),
    failures: mark.failures,
    slot: mark.slot?.toISOString() ?? null,
    lastError: mark.lastError,
  };
}

/** An error's first line, shortened: the pause mark keeps a summary, the run record the whole error. */
export function errorSummary(message: string | undefined | null): string | null {
  if (!message) return null;
  const line = message.split("\n", 1)[0]?.trim() ?? "";
  return line.length > SUMMARY_MAX ? `${line.slice(0, SUMMARY_MAX - 1)}…` : line;
}

function recordOf(value: unknown): Record<string, unknown> | undefined {
  return typeof value === "object" && value !== null && !Array.isArray(value)
    ? (value as Record<string, unknown>)
    : undefined;
}

/**
 * A run whose handler never started. Agenda reports the refusal of a run as a failed run (a `fail`
 * row and an 'error' event); a run that never reached its handler is not a failure of the task,
 * so the engine and the run recorder recognise these errors by a marker in the message and record
 * nothing: no `fail` row, no failure in a row, no alert. The slot is released untouched (see
 * CronwardenJobRepository) and runs under a later lock.
 */
export const NOT_STARTED_MARKER = "(run not started)";

export class RunNotStartedError extends Error {
  constructor(message: string) {
    super(`${message} ${NOT_STARTED_MARKER}`);
    this.name = "RunNotStartedError";
  }
}

/**
 * A pre-locked run whose lock was lost before it started: its lock expired while it waited for a
 * free worker, and the job was locked again (by the pass this instance asks for at once, or by
 * another instance; src/engine/claimLoop.ts). The save that would start it is refused, so its
 * handler never runs; the job runs under the newer lock.
 */
export const STALE_START_MESSAGE = "not started: its lock expired before a worker was free";

export class StaleStartError extends RunNotStartedError {
  constructor(taskName: string) {
    super(`${taskName}: ${STALE_START_MESSAGE}; it runs under the newer lock`);
    this.name = "StaleStartError";
  }
}

/** The database could not be reached between the lock and the handler's start. */
export class DatabaseUnreachableBeforeStartError extends RunNotStartedError {
  constructor(taskName: string, cause: Error) {
    super(
      `${taskName}: the database could not be reached before the handler started (${cause.message}); the slot was released and runs once the database is back`,
    );
    this.name = "DatabaseUnreachableBeforeStartError";
  }
}

/** The namespace's pause-all switch was on when the run came to its handler (src/engine/pauseGate.ts). */
export class PausedBeforeStartError extends RunNotStartedError {
  constructor(taskName: string) {
    super(
      `${taskName}: pause-all is on; the slot was given back and runs (by its catchUp) once it is lifted`,
    );
    this.name = "PausedBeforeStartError";
  }
}

export function isNotStarted(message: string | undefined): boolean {
  return message?.includes(NOT_STARTED_MARKER) ?? false;
}

/**
 * A pre-locked run whose lock was lost before it started: its lock expired while it waited for a
 * free worker, and the job was locked again (by this instance's next poll or by another
 * instance). The save that would start it is refused, so its handler never runs; the job runs
 * under the newer lock. Agenda reports the refusal as a failed run and an error; the engine and
 * the run recorder recognise it by this message and record nothing.
 */
export const STALE_START_MESSAGE = "not started: its lock expired before a worker was free";

export class StaleStartError extends Error {
  constructor(taskName: string) {
    super(`${taskName}: ${STALE_START_MESSAGE}; it runs under the newer lock`);
    this.name = "StaleStartError";
  }
}

export function isStaleStart(message: string | undefined): boolean {
  return message?.includes(STALE_START_MESSAGE) ?? false;
}

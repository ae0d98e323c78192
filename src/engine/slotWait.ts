/**
 * How a run handed over ahead of its slot waits for it (src/engine/taskRunner.ts,
 * #untilHandlerTime): one step at a time, decided from the milliseconds left.
 *
 * - More than PRE_WAKE_MS (+1) left: a timer to PRE_WAKE_MS before the slot. The process has been
 *   idle since its start save, up to the start-ahead before, and a core idle that long (on a
 *   virtual machine) wakes several milliseconds late; one that woke shortly before does not. So
 *   the process wakes once a little ahead, and the slot finds it awake (docs/design.md, "Waking
 *   before the slot").
 * - Then a timer to the last millisecond, which is waited by event-loop turns: a timer set for it
 *   fires a millisecond or two late (the event loop's clock is whole milliseconds, and `Date` may
 *   read behind it).
 */
export const PRE_WAKE_MS = 50;
export const LAST_MS_BY_TURNS = 1;

/** The next step of the wait with `leftMs` to the slot: a timer of so many ms, a loop turn, or done. */
export function slotWaitStep(leftMs: number): { timerMs: number } | "turn" | "done" {
  if (leftMs <= 0) return "done";
  if (leftMs <= LAST_MS_BY_TURNS) return "turn";
  return { timerMs: leftMs - (leftMs > PRE_WAKE_MS + LAST_MS_BY_TURNS ? PRE_WAKE_MS : LAST_MS_BY_TURNS) };
}

/**
 * After a handler started at its slot, its run's bookkeeping (the start record, the log line, the
 * events, and the end of a handler that returns at once: its record and the final save) waits until
 * this long after the slot (src/engine/runSupervisor.ts, `quietMs`). Processes whose slots share
 * the instant wake together, and that work in the first to start takes a core from the others
 * still waking: the slot's instant belongs to the handlers. A run that starts later, as a herd's
 * runs waiting for a worker, does not wait, so the quiet holds a worker at most this long after
 * the slot. The records keep the handler's own times.
 */
export const QUIET_AFTER_SLOT_MS = 20;

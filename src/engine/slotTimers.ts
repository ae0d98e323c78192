/**
 * One precise timer per job locked ahead of its slot, so that its run starts at the slot by the
 * wall clock, whatever Agenda's own timer does.
 *
 * Agenda (6.2.6 JobProcessor.jobProcessing) gives a job locked ahead one setTimeout for the time
 * left to its slot. Node measures timers from the event loop's cached time, which is older than the
 * wall clock when the loop was busy in the same turn (a herd, a garbage collection, a slow
 * listener); the timer then fires before the slot by `Date`, Agenda puts the job back in its queue
 * without a new timer, and the run waits for the next poll: a minute task started one whole poll
 * (5 s) late. Here, a timer that fires before its slot by the wall clock is armed again for the rest,
 * and at the slot the workers are woken for the task (src/engine/notificationChannel.ts wakeLocally),
 * which starts the queued job. When Agenda's own timer worked, the wake finds nothing to do.
 */
export class SlotTimers {
  readonly #timers = new Map<string, NodeJS.Timeout>();
  readonly #wake: (taskName: string) => void;
  readonly #now: () => number;
  /** Past the slot by this much when woken: a timer never fires before its slot by the clock it was set from. */
  static readonly AFTER_SLOT_MS = 1;

  constructor(wake: (taskName: string) => void, now: () => number = () => Date.now()) {
    this.#wake = wake;
    this.#now = now;
  }

  /** Wakes the workers for `taskName` at `slot` (replacing any timer of this job). */
  arm(jobId: string, taskName: string, slot: Date): void {
    this.disarm(jobId);
    const left = slot.getTime() - this.#now();
    const timer = setTimeout(() => {
      this.#timers.delete(jobId);
      if (this.#now() < slot.getTime()) {
        this.arm(jobId, taskName, slot); // early by the wall clock: the rest of the wait
        return;
      }
      this.#wake(taskName);
    }, Math.max(0, left) + SlotTimers.AFTER_SLOT_MS);
    timer.unref();
    this.#timers.set(jobId, timer);
  }

  disarm(jobId: string): void {
    clearTimeout(this.#timers.get(jobId));
    this.#timers.delete(jobId);
  }

  get armed(): number {
    return this.#timers.size;
  }

  stop(): void {
    for (const timer of this.#timers.values()) clearTimeout(timer);
    this.#timers.clear();
  }
}

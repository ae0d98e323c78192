/**
 * The engine's claim loop: which due jobs this instance locks, and when each one starts. It
 * replaces Agenda's job processor (agenda 6.2.6 JobProcessor), which polled with one locking
 * statement per job name (its work grew with the number of tasks, and its queue's with the square
 * of the queue) and gave a job locked ahead of its slot one timer that, firing early by the wall
 * clock, left the job to the next poll: a minute task started one whole poll late.
 *
 * - One statement per pass claims up to `maxClaimed - held` due jobs of all names, including those
 *   due within the look-ahead (src/engine/sql/claim.ts claimDueJobs). A pass runs every poll, when a
 *   run ends (there is room again), and on a job notification (a save, a run-now, a release).
 * - A job claimed ahead of its slot gets one timer, for `startAheadMs` before the slot: its run
 *   makes the start save and the checks before its handler then, and waits for the slot only to
 *   call the handler (src/engine/taskRunner.ts), so the database round trip is not between the
 *   slot and the handler. A timer that fires early by `now()` is armed again for the rest, so the
 *   start never waits for a poll.
 * - Due jobs wait in slot order for one of `maxConcurrency` workers. One whose lock expired while
 *   it waited is dropped (the lock is no longer this instance's to use; see onStale).
 * - The run itself (start save, handler, final save) is the `run` callback's; the loop only counts it.
 *   A worker is free again once the run says its handler is done (`handlerDone`): the final save
 *   that follows holds the job (its name is not claimed again, it counts against `maxClaimed`, a
 *   drain waits for it) but not a worker, so in a herd the next handler does not wait for the
 *   previous run's save (each save is a database round trip, batched with others').
 *
 * The deps are narrow so that tests drive the loop with their own clock and claims
 * (test/unit/claimLoop.test.ts).
 */

export interface ClaimedJob {
  readonly id: string;
  readonly name: string;
  /** When it starts: its slot, or the claim time for a job due now or taken over. */
  readonly dueAt: number;
  /** The lock time it was claimed with. */
  readonly lockedAt: number;
}

export interface ClaimRequest {
  /** Claim jobs due before this (now plus the look-ahead). */
  until: Date;
  limit: number;
  /** Names this instance holds (claimed or running): not to be claimed again. */
  holding: readonly string[];
  now: Date;
}

export interface ClaimLoopDeps<J extends ClaimedJob> {
  claim(request: ClaimRequest): Promise<J[]>;
  /**
   * Runs a claimed job; resolves once its run is over, its final save included. Calls
   * `handlerDone` once no handler of it runs any more (optional: the run's end implies it).
   */
  run(job: J, handlerDone: () => void): Promise<void>;
  /** Frees a claimed job that will not run here (the loop stops before its slot). */
  release(job: J): Promise<void>;
  /** A claimed job's lock expired before a worker was free: it is dropped, not run. */
  onStale(job: J): void;
  /** A pass or a run failed; the loop goes on (the next pass, or the next run). */
  onError(error: unknown, job?: J): void;
  processEveryMs: number;
  /** How far ahead of now a pass claims (at least one poll, so a slot never waits for the next). */
  lookAheadMs: number;
  /**
   * How long before its slot a claimed job is handed to `run` (0: at the slot). Less than the
   * look-ahead's margin over one poll, so a job claimed by a poll is still ahead of it.
   */
  startAheadMs?: number;
  maxConcurrency: number;
  /** Jobs held at once, claimed and running together. */
  maxClaimed: number;
  lockLifetimeMs: number;
  now?: () => number;
}

export interface LoopDrainResult {
  /** Runs that ended during the drain. */
  completed: number;
  /** Runs still going at the deadline. */
  running: number;
}

/** Past the slot by this much when started: a timer never fires before its slot by the clock it was set from. */
const AFTER_SLOT_MS = 1;

export class ClaimLoop<J extends ClaimedJob> {
  readonly #deps: ClaimLoopDeps<J>;
  readonly #now: () => number;
  /** Claimed and waiting for their slot (a timer) or for a worker (the queue). */
  readonly #waiting = new Map<string, { job: J; timer?: NodeJS.Timeout }>();
  readonly #queue: J[] = [];
  /** Runs not over yet, their final save included. */
  readonly #running = new Map<string, J>();
  /** Of those, the ones whose handler may still run: each holds one of `maxConcurrency` workers. */
  readonly #working = new Set<string>();
  readonly #runEnded = new Set<() => void>();
  #interval: NodeJS.Timeout | undefined;
  #pass: Promise<void> | undefined;
  #passAgain = false;
  #started = false;

  constructor(deps: ClaimLoopDeps<J>) {
    this.#deps = deps;
    this.#now = deps.now ?? Date.now;
  }

  get started(): boolean {
    return this.#started;
  }

  /** Jobs claimed and not started yet, runs going (their final save included), and handlers going. */
  get held(): { waiting: number; running: number; working: number } {
    return { waiting: this.#waiting.size, running: this.#running.size, working: this.#working.size };
  }

  start(): void {
    if (this.#started) return;
    this.#started = true;
    this.#interval = setInterval(() => this.claimNow(), this.#deps.processEveryMs);
    this.claimNow();
  }

  /**
   * Asks for a pass now (a job notification, a run's end, a row given back). One pass at a time;
   * asks during a pass make one more pass after it.
   */
  claimNow(): void {
    if (!this.#started) return;
    if (this.#pass) {
      this.#passAgain = true;
      return;
    }
    this.#pass = this.#passes().finally(() => {
      this.#pass = undefined;
    });
  }

  /** Resolves once the passes asked for so far are done (tests). */
  async settled(): Promise<void> {
    while (this.#pass) await this.#pass;
  }

  async #passes(): Promise<void> {
    do {
      this.#passAgain = false;
      try {
        await this.#claimOnce();
      } catch (error) {
        this.#deps.onError(error);
        return; // the next poll tries again
      }
    } while (this.#passAgain && this.#started);
  }

  async #claimOnce(): Promise<void> {
    const limit = this.#deps.maxClaimed - this.#waiting.size - this.#running.size;
    if (limit <= 0) return;
    const now = this.#now();
    const holding = [...this.#waiting.values()].map((held) => held.job.name);
    for (const job of this.#running.values()) holding.push(job.name);
    const jobs = await this.#deps.claim({
      until: new Date(now + this.#deps.lookAheadMs),
      limit,
      holding,
      now: new Date(now),
    });
    for (const job of jobs) {
      if (!this.#started) {
        // stopped while the claim was in flight: the job is not run here
        await this.#release(job);
        continue;
      }
      this.#waiting.set(job.id, { job });
      this.#arm(job);
    }
    if (jobs.length > 0) this.#startDue();
  }

  /** Queues a job at its start (its slot less the start-ahead): at once if due, else by a timer armed again if it fires early. */
  #arm(job: J): void {
    const held = this.#waiting.get(job.id);
    if (!held) return;
    const left = job.dueAt - (this.#deps.startAheadMs ?? 0) - this.#now();
    if (left <= 0) {
      held.timer = undefined;
      this.#queue.push(job);
      return;
    }
    held.timer = setTimeout(() => {
      this.#arm(job);
      this.#startDue();
    }, left + AFTER_SLOT_MS);
  }

  /** Starts queued jobs, most overdue first, while workers are free. */
  #startDue(): void {
    if (!this.#started) return;
    this.#queue.sort((a, b) => a.dueAt - b.dueAt);
    while (this.#working.size < this.#deps.maxConcurrency) {
      const job = this.#queue.shift();
      if (!job) return;
      this.#waiting.delete(job.id);
      if (this.#now() > job.lockedAt + this.#deps.lockLifetimeMs) {
        this.#deps.onStale(job);
        continue;
      }
      this.#running.set(job.id, job);
      this.#working.add(job.id);
      const freeWorker = () => {
        if (this.#working.delete(job.id)) this.#startDue();
      };
      void this.#deps
        .run(job, freeWorker)
        .catch((error: unknown) => this.#deps.onError(error, job))
        .finally(() => {
          this.#working.delete(job.id);
          this.#running.delete(job.id);
          for (const ended of this.#runEnded) ended();
          this.claimNow(); // room again, and the job's next slot may be within the look-ahead
          this.#startDue();
        });
    }
  }

  async #release(job: J): Promise<void> {
    try {
      await this.#deps.release(job);
    } catch (error) {
      this.#deps.onError(error, job);
    }
  }

  /**
   * Stops claiming, frees the jobs claimed and not started, and waits for the runs going, up to
   * `timeoutMs`.
   */
  async drain(timeoutMs: number): Promise<LoopDrainResult> {
    this.#started = false;
    clearInterval(this.#interval);
    this.#interval = undefined;
    await this.settled(); // a pass in flight releases what it claims once it sees the stop
    const unstarted = [...this.#waiting.values()];
    this.#waiting.clear();
    this.#queue.length = 0;
    for (const held of unstarted) clearTimeout(held.timer);
    await Promise.all(unstarted.map((held) => this.#release(held.job)));
    let completed = 0;
    if (this.#running.size > 0) {
      await new Promise<void>((resolve) => {
        const finish = () => {
          clearTimeout(deadline);
          this.#runEnded.delete(ended);
          resolve();
        };
        const ended = () => {
          completed += 1;
          if (this.#running.size === 0) finish();
        };
        const deadline = setTimeout(finish, timeoutMs);
        this.#runEnded.add(ended);
      });
    }
    return { completed, running: this.#running.size };
  }
}

/**
 * The engine's claim loop: which due jobs this instance locks, and when each one starts. It
 * replaces Agenda's job processor (agenda 6.2.6 JobProcessor), which polled with one locking
 * statement per job name (its work grew with the number of tasks, and its queue's with the square
 * of the queue) and gave a job locked ahead of its slot one timer that, firing early by the wall
 * clock, left the job to the next poll: a minute task started one whole poll late.
 *
 * - One statement per pass claims up to `maxClaimed - held` due jobs of all names, including those
 *   due within the look-ahead, and past `baseClaimed` no more than the instance's share of them
 *   (src/engine/sql/claim.ts claimDueJobs). A pass runs every poll, when a run ends (there is room
 *   again), and on a job notification (a save, a run-now, a release).
 * - A job claimed ahead of its slot gets one timer, for `startAheadMs` before the slot: its run
 *   makes the start save and the checks before its handler then, and waits for the slot only to
 *   call the handler (src/engine/taskRunner.ts), so the database round trip is not between the
 *   slot and the handler. A timer that fires early by `now()` is armed again for the rest, so the
 *   start never waits for a poll.
 * - Due jobs are handed to `run` in slot order: one per free worker and, "on deck", as many as the
 *   workers are expected to start within the start-ahead, all of them before the first handler
 *   starts (#startDue): a herd at the first slot is prepared before it. One whose lock expired while
 *   it waited is dropped (the lock is no longer this instance's to use; see onStale), and a pass
 *   claims it again at once.
 * - The run itself (start save, checks, handler, final save) is the `run` callback's; the loop only
 *   counts it. A run asks for one of `maxConcurrency` workers (`turn.worker()`) just before its
 *   handler, so a run on deck makes its start save and checks while the handlers ahead of it run:
 *   when a worker is free, the next handler starts at once instead of after a database round trip
 *   (in a herd of short handlers that round trip was each worker's whole turn). Workers are
 *   granted in the order asked.
 * - A worker is free again once the run says its handler is done (`turn.handlerDone()`): the final
 *   save that follows holds the job (its name is not claimed again, it counts against `maxClaimed`,
 *   a drain waits for it) but not a worker, so in a herd the next handler does not wait for the
 *   previous run's save (each save is a database round trip, batched with others').
 *
 * The deps are narrow so that tests drive the loop with their own clock and claims
 * (test/unit/claimLoop.test.ts).
 */

import type { Clock, ClockTimer } from "../core/clock.js";

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
  /**
   * Claim no more than this instance's share of the jobs due before `until` (those it `held`
   * included), but at least `atLeast`: so that one instance does not hold a whole herd that the
   * others could start as soon. Absent: `limit` alone.
   */
  share?: { atLeast: number; held: number };
}

export interface ClaimLoopDeps<J extends ClaimedJob> {
  claim(request: ClaimRequest): Promise<J[]>;
  /** Runs a claimed job; resolves once its run is over, its final save included. */
  run(job: J, turn: RunTurn): Promise<void>;
  /** Frees a claimed job that will not run here (the loop stops before its slot). */
  release(job: J): Promise<void>;
  /**
   * A claimed job's lock expired before it started: it is dropped, not run, and a pass asked at
   * once claims it again. It waited for a free `worker`, or for its `slot`, which a poll longer
   * than the lock lifetime claims later than the lock lasts.
   */
  onStale(job: J, waitedFor: "worker" | "slot"): void;
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
  /** Jobs held at once, claimed and running together, however long handlers take. */
  baseClaimed?: number;
  /**
   * Jobs held at once while handlers turn over fast enough that the workers would start them all
   * within the start-ahead, and before the first handler starts (at least `baseClaimed`; past it,
   * the claim's `share` bounds them too).
   */
  maxClaimed: number;
  lockLifetimeMs: number;
  /** Slots, claim times and the loop's timers (src/core/clock.ts). */
  clock: Clock;
}

/** A run's use of the loop's workers. */
export interface RunTurn {
  /**
   * Resolves once one of the `maxConcurrency` workers is this run's: its handler may be called.
   * Undefined: one was free at once (or the run holds one already). A run that ends without asking
   * (a skipped slot) never holds one.
   */
  worker(): Promise<void> | undefined;
  /** No handler of this run runs any more: its worker is free (optional: the run's end implies it). */
  handlerDone(): void;
}

export interface LoopDrainResult {
  /** Runs that ended during the drain. */
  completed: number;
  /** Runs still going at the deadline. */
  running: number;
}

/** Past the slot by this much when started: a timer never fires before its slot by the clock it was set from. */
const AFTER_SLOT_MS = 1;
/** Weight of the last handler's time in the expected turn of a worker (an exponential average). */
const TURN_WEIGHT = 0.2;
/** The expected turn is never taken as shorter than this (a handler that returns at once). */
const MIN_TURN_MS = 0.1;

export class ClaimLoop<J extends ClaimedJob> {
  readonly #deps: ClaimLoopDeps<J>;
  readonly #clock: Clock;
  /** Claimed and waiting for their slot (a timer) or for a worker (the queue). */
  readonly #waiting = new Map<string, { job: J; timer?: ClockTimer | undefined }>();
  readonly #queue: J[] = [];
  /** Runs not over yet, their final save included. */
  readonly #running = new Map<string, J>();
  /** Of those, the ones not holding a worker yet, their handler still to come (on deck). */
  readonly #onDeck = new Set<string>();
  /** Of those, the ones whose handler may still run: each holds one of `maxConcurrency` workers. */
  readonly #working = new Set<string>();
  /**
   * Runs on deck that asked for a worker, by id, in the order asked (a Map keeps insertion order):
   * a herd puts up to a thousand on deck, and each run's end removes its own ask.
   */
  readonly #workerAsks = new Map<string, () => void>();
  /** When each run holding a worker got it, and the sum of those times (for their mean age). */
  readonly #workerSince = new Map<string, number>();
  #workerSinceSum = 0;
  /** How long a handler holds its worker, averaged over the runs so far (none before the first). */
  #turnMs: number | undefined;
  readonly #runEnded = new Set<() => void>();
  #interval: ClockTimer | undefined;
  #pass: Promise<void> | undefined;
  #passAgain = false;
  #started = false;

  constructor(deps: ClaimLoopDeps<J>) {
    this.#deps = deps;
    this.#clock = deps.clock;
  }

  get started(): boolean {
    return this.#started;
  }

  /**
   * Jobs claimed and not handed to a run yet, runs going (their final save included), of those the
   * ones with a worker (their handler going), and the ones on deck (handler still to come).
   */
  get held(): { waiting: number; running: number; working: number; onDeck: number } {
    return {
      waiting: this.#waiting.size,
      running: this.#running.size,
      working: this.#working.size,
      onDeck: this.#onDeck.size,
    };
  }

  start(): void {
    if (this.#started) return;
    this.#started = true;
    this.#interval = this.#clock.setInterval(() => this.claimNow(), this.#deps.processEveryMs);
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
    const held = this.#waiting.size + this.#running.size;
    const limit = this.#claimLimit() - held;
    if (limit <= 0) return;
    const atLeast = (this.#deps.baseClaimed ?? this.#deps.maxClaimed) - held;
    const now = this.#clock.now();
    const holding = [...this.#waiting.values()].map((waiting) => waiting.job.name);
    for (const job of this.#running.values()) holding.push(job.name);
    const jobs = await this.#deps.claim({
      until: new Date(now + this.#deps.lookAheadMs),
      limit,
      holding,
      now: new Date(now),
      ...(limit > atLeast ? { share: { atLeast, held } } : {}),
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
    const left = job.dueAt - (this.#deps.startAheadMs ?? 0) - this.#clock.now();
    if (left <= 0) {
      held.timer = undefined;
      this.#enqueue(job);
      return;
    }
    held.timer = this.#clock.setTimeout(() => {
      this.#arm(job);
      this.#startDue();
    }, left + AFTER_SLOT_MS);
  }

  /**
   * Into the queue in slot order, kept as jobs arrive rather than sorted at each hand-out: in a
   * herd a thousand jobs queue and there are several hand-outs per run. Claims come most overdue
   * first, so a job almost always goes at the end.
   */
  #enqueue(job: J): void {
    const queue = this.#queue;
    let at = queue.length;
    while (at > 0 && (queue[at - 1] as J).dueAt > job.dueAt) at--;
    queue.splice(at, 0, job);
  }

  /**
   * How long a worker is expected to stay busy with its handler: the average so far, or longer
   * while the handlers going have already run longer than that (a herd of slow handlers after one
   * of quick ones must not look quick). Undefined before the first handler starts (#claimLimit).
   */
  #expectedTurnMs(): number | undefined {
    const going = this.#workerSince.size;
    if (this.#turnMs === undefined && going === 0) return undefined;
    const meanAge = going > 0 ? this.#clock.now() - this.#workerSinceSum / going : 0;
    return Math.max(this.#turnMs ?? 0, meanAge, MIN_TURN_MS);
  }

  /**
   * How many handlers the workers are expected to start within the start-ahead, besides the ones
   * they run now; all of them (Infinity) before the first handler starts.
   */
  #startsAhead(): number {
    const turnMs = this.#expectedTurnMs();
    if (turnMs === undefined) return Number.POSITIVE_INFINITY;
    return Math.floor((this.#deps.maxConcurrency * (this.#deps.startAheadMs ?? 0)) / turnMs);
  }

  /**
   * Jobs to hold: `baseClaimed`, and more (up to `maxClaimed`, and no more than the instance's
   * share of a herd: the claim's `share`) while the workers would start them all within the
   * start-ahead. Before the first handler starts the loop cannot tell how fast they turn over, and
   * holds up to its share: a herd at an instance's first slot is prepared before it, spread over
   * the instances, whatever its handlers take (docs/design.md, "The claim loop").
   */
  #claimLimit(): number {
    const base = this.#deps.baseClaimed ?? this.#deps.maxClaimed;
    const fast = this.#deps.maxConcurrency + this.#startsAhead();
    return Math.min(this.#deps.maxClaimed, Math.max(base, fast));
  }

  /**
   * Hands queued jobs to runs, most overdue first: one per free worker, and, on deck, as many as
   * the workers are expected to start within the start-ahead (src/engine/taskRunner.ts). So a run
   * makes its start save at most about as long before its handler as a run claimed ahead of its
   * slot does, and with slow handlers no run waits on deck, recorded as started, for a worker.
   */
  #startDue(): void {
    if (!this.#started) return;
    let dropped = false;
    // asked again for each run: a run handed over may take a worker at once, and so tell how long
    // the handlers have been going
    while (this.#onDeck.size + this.#working.size < this.#deps.maxConcurrency + this.#startsAhead()) {
      const job = this.#queue.shift();
      if (!job) break;
      this.#waiting.delete(job.id);
      const expiredAt = job.lockedAt + this.#deps.lockLifetimeMs;
      if (this.#clock.now() > expiredAt) {
        this.#deps.onStale(job, job.dueAt - (this.#deps.startAheadMs ?? 0) > expiredAt ? "slot" : "worker");
        dropped = true;
        continue;
      }
      this.#running.set(job.id, job);
      this.#onDeck.add(job.id);
      const turn: RunTurn = {
        worker: () => this.#askWorker(job.id),
        handlerDone: () => this.#freeWorker(job.id),
      };
      void this.#deps
        .run(job, turn)
        .catch((error: unknown) => this.#deps.onError(error, job))
        .finally(() => {
          this.#freeWorker(job.id);
          this.#running.delete(job.id);
          for (const ended of this.#runEnded) ended();
          this.claimNow(); // room again, and the job's next slot may be within the look-ahead
          this.#startDue();
        });
    }
    // the job is still due and its lock is anyone's: a pass now claims it again under a new lock
    // (unless another instance did), instead of the next poll
    if (dropped) this.claimNow();
  }

  #askWorker(id: string): Promise<void> | undefined {
    if (!this.#onDeck.has(id)) return undefined; // already has one, or its run is over
    if (this.#working.size < this.#deps.maxConcurrency) {
      this.#grantWorker(id);
      this.#startDue(); // room on deck
      return undefined;
    }
    return new Promise((resolve) => this.#workerAsks.set(id, resolve));
  }

  #grantWorker(id: string): void {
    this.#onDeck.delete(id);
    this.#working.add(id);
    const now = this.#clock.now();
    this.#workerSince.set(id, now);
    this.#workerSinceSum += now;
  }

  /** The run's handler is done, or the run is over: its worker (or its place on deck) is free. */
  #freeWorker(id: string): void {
    this.#workerAsks.delete(id);
    const since = this.#workerSince.get(id);
    if (since !== undefined) {
      this.#workerSince.delete(id);
      this.#workerSinceSum = this.#workerSince.size === 0 ? 0 : this.#workerSinceSum - since;
      const turn = this.#clock.now() - since;
      this.#turnMs = this.#turnMs === undefined ? turn : this.#turnMs + TURN_WEIGHT * (turn - this.#turnMs);
    }
    let freed = this.#working.delete(id);
    freed = this.#onDeck.delete(id) || freed;
    while (this.#working.size < this.#deps.maxConcurrency) {
      const next = this.#workerAsks.entries().next();
      if (next.done) break;
      const [nextId, grant] = next.value;
      this.#workerAsks.delete(nextId);
      this.#grantWorker(nextId);
      grant();
      freed = true;
    }
    if (freed) this.#startDue(); // room on deck
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
    this.#clock.clearInterval(this.#interval);
    this.#interval = undefined;
    await this.settled(); // a pass in flight releases what it claims once it sees the stop
    const unstarted = [...this.#waiting.values()];
    this.#waiting.clear();
    this.#queue.length = 0;
    for (const held of unstarted) this.#clock.clearTimeout(held.timer);
    await Promise.all(unstarted.map((held) => this.#release(held.job)));
    let completed = 0;
    if (this.#running.size > 0) {
      await new Promise<void>((resolve) => {
        const finish = () => {
          this.#clock.clearTimeout(deadline);
          this.#runEnded.delete(ended);
          resolve();
        };
        const ended = () => {
          completed += 1;
          if (this.#running.size === 0) finish();
        };
        const deadline = this.#clock.setTimeout(finish, timeoutMs);
        this.#runEnded.add(ended);
      });
    }
    return { completed, running: this.#running.size };
  }
}

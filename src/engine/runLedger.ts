/**
 * The runs this instance has claimed or is running, one SlotRun each, keyed by job id
 * (src/engine/slotRun.ts). The engine owns the ledger; the claim adds a run and its end removes it.
 */

import { type Clock, systemClock } from "../core/clock.js";
import { type LockedRow, SlotRun } from "./slotRun.js";

export class RunLedger {
  readonly #runs = new Map<string, SlotRun>();
  readonly #clock: Clock;

  constructor(clock: Clock = systemClock) {
    this.#clock = clock;
  }

  /** The claim locked a job: its run starts here, replacing what an earlier claim left. */
  claimed(jobId: string, row: LockedRow): SlotRun {
    const run = SlotRun.claimed(row, new Date(this.#clock()));
    this.#runs.set(jobId, run);
    return run;
  }

  get(jobId: string): SlotRun | undefined {
    return this.#runs.get(jobId);
  }

  /** The run that is starting, made here if its claim went unseen. */
  starting(jobId: string, startedAt: Date): SlotRun {
    let run = this.#runs.get(jobId);
    if (!run) {
      run = SlotRun.unclaimed(startedAt);
      this.#runs.set(jobId, run);
    }
    run.starting(startedAt);
    return run;
  }

  forget(jobId: string): void {
    this.#runs.delete(jobId);
  }
}

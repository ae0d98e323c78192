import type { Job } from "agenda";
import type { Clock } from "../core/clock.js";
import type { Logger } from "../core/logger.js";
import type { RunTurn } from "./claimLoop.js";
import type { RunHandler, TaskDefinitionOptions } from "./engineApi.js";
import type { CronwardenJobRepository } from "./jobRepository.js";
import type { RunRecorder } from "./runRecorder.js";
import type { SlotRun } from "./slotRun.js";
import { RunNotStartedError } from "./staleStart.js";
import type { HandlerEnd, TaskRunner } from "./taskRunner.js";

/** What every run's owner uses: the job rows' writes, the run log, the checks and attempts. */
export interface SlotRunnerPorts {
  rows: Pick<
    CronwardenJobRepository,
    "startRun" | "endRun" | "releaseUnstarted" | "closeFinishedSlot" | "handOff"
  >;
  recorder: Pick<RunRecorder, "recordOutcome">;
  runner: TaskRunner;
  logger: Logger;
  clock: Clock;
  instanceId: string;
}

/** A task's code and options, as registered. */
export interface TaskDefinition {
  handler: RunHandler;
  options: TaskDefinitionOptions;
}

/** How the run ended, which decides its last write: one per kind, nothing else decides it. */
type RunEnd =
  | { kind: "ran"; error?: Error | undefined }
  | { kind: "finishedByDeadRun" }
  | { kind: "notStarted" }
  | { kind: "handedOff"; error: Error };

/**
 * The one owner of a slot's run on this instance, from the claim to the final save. It performs
 * the whole sequence, in order:
 * 1. the start save (its lock renewed, its next run and catch-up decided: `rows.startRun`);
 * 2. the checks, the wait for its slot and a worker, and the handler's attempts (TaskRunner);
 * 3. the outcome row (RunRecorder.recordOutcome);
 * 4. the write that ends it, one per way it ended: the final save (`endRun`), the slot given back
 *    untouched (`releaseUnstarted`), a dead run's finished slot closed (`closeFinishedSlot`), or
 *    the slot handed to another instance at shutdown (`handOff`).
 * Agenda's `Job` is only the job document here (and Agenda's next-run computation); its `run()`
 * is not used. `cutOff()` is the drain's one way in.
 */
export class SlotRunner {
  readonly run: SlotRun;
  readonly #job: Job;
  readonly #definition: TaskDefinition;
  readonly #ports: SlotRunnerPorts;
  /** Fires at the drain deadline, or when the next slot comes due for overlap cancelRunning. */
  readonly #slot = new AbortController();

  constructor(run: SlotRun, job: Job, definition: TaskDefinition, ports: SlotRunnerPorts) {
    this.run = run;
    this.#job = job;
    this.#definition = definition;
    this.#ports = ports;
  }

  /**
   * Runs the slot. Rejects only when the start save refused it (its lock was taken again:
   * StaleStartError) or could not be made (the database unreachable; the slot was given back).
   */
  async execute(turn: RunTurn): Promise<void> {
    const attrs = this.#job.attrs;
    attrs.lastRunAt = new Date(this.#ports.clock.now());
    attrs.lastModifiedBy = this.#ports.instanceId;
    computeNextRunAt(this.#job);
    await this.#ports.rows.startRun(this.run, attrs);
    const end = await this.#runHandler(turn);
    await this.#end(end);
  }

  /** The drain's deadline passed: the handler's signal fires, and a run that fails now is handed off. */
  cutOff(): void {
    this.run.cutOff();
    this.#slot.abort(new Error("shutdown: drain timeout reached; the run is handed to another instance"));
  }

  async #runHandler(turn: RunTurn): Promise<RunEnd> {
    let ended: HandlerEnd;
    try {
      ended = await this.#ports.runner.run(this.run, {
        job: this.#job,
        handler: this.#definition.handler,
        options: this.#definition.options,
        turn,
        slot: this.#slot,
      });
    } catch (thrown) {
      const error = thrown instanceof Error ? thrown : new Error(String(thrown));
      if (error instanceof RunNotStartedError) return { kind: "notStarted" };
      if (this.run.cutOffAtShutdown && this.run.outcome === "interrupted")
        return { kind: "handedOff", error };
      return { kind: "ran", error };
    } finally {
      turn.handlerDone();
    }
    return ended === "finishedByDeadRun" ? { kind: "finishedByDeadRun" } : { kind: "ran" };
  }

  async #end(end: RunEnd): Promise<void> {
    const { rows } = this.#ports;
    switch (end.kind) {
      case "notStarted":
        return rows.releaseUnstarted(this.run);
      case "finishedByDeadRun":
        return rows.closeFinishedSlot(this.run, this.#job.attrs);
      case "handedOff":
        void this.#record(end.error);
        return rows.handOff(this.run);
      case "ran":
        void this.#record(end.error);
        return this.#saveEnd();
    }
  }

  /** The outcome row, with the job document's end fields set as Agenda sets them. */
  #record(error: Error | undefined): Promise<void> {
    const attrs = this.#job.attrs;
    const reportedAt = new Date(this.#ports.clock.now());
    attrs.lastFinishedAt = reportedAt;
    if (error) {
      attrs.failReason = error.message;
      attrs.failCount = (attrs.failCount ?? 0) + 1;
      attrs.failedAt = reportedAt;
    } else if (attrs.failCount) attrs.failCount = 0;
    return this.#ports.recorder.recordOutcome(this.run, {
      succeeded: error === undefined,
      error,
      reportedAt,
      lastRunAt: attrs.lastRunAt,
      failCount: attrs.failCount,
    });
  }

  /** The final save: a failure to save (the lock no longer ours) leaves the row to its new owner. */
  async #saveEnd(): Promise<void> {
    try {
      await this.#ports.rows.endRun(this.run, this.#job.attrs);
    } catch (error) {
      this.#ports.logger.debug(
        { err: error, task: this.run.taskName },
        "the end of a run was not saved; the row belongs to the lock's new holder",
      );
    }
  }
}

/** Agenda's next-run computation on the job document (private in agenda 6.2.6's types, pinned). */
function computeNextRunAt(job: Job): void {
  (job as unknown as { computeNextRunAt(): unknown }).computeNextRunAt();
}

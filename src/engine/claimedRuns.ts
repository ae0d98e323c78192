import { type Agenda, Job } from "agenda";
import type { Clock } from "../core/clock.js";
import type { Logger } from "../core/logger.js";
import { type ClaimedJob, ClaimLoop, type RunTurn } from "./claimLoop.js";
import type { EngineHooks, RunHandler, TaskDefinitionOptions } from "./engineApi.js";
import type { ClaimedRow, CronwardenJobRepository } from "./jobRepository.js";
import type { WakeJob } from "./jobWrites.js";
import { NextRunAhead } from "./nextRunAhead.js";
import type { SlotRun } from "./slotRun.js";
import { SlotRunner, type SlotRunnerPorts, type TaskDefinition } from "./slotRunner.js";
import { StaleStartError } from "./staleStart.js";

/**
 * Jobs held at once (claimed ahead of their slot or waiting for a worker, plus running), per
 * worker. Without a bound one instance would lock a whole herd at the poll before its slot while
 * the others idle; the rest are claimed as runs end (src/engine/claimLoop.ts).
 */
const HELD_LOCKS_PER_WORKER = 2;
/**
 * Before the first handler starts, and with handlers that turn over fast (src/engine/claimLoop.ts
 * #claimLimit), up to this many, and no more than the instance's share of a herd. A job claimed
 * after its slot waits for a claim and a start save before its handler, so this bounds how much of
 * a herd is prepared before its slot: high enough that an instance's share of a large herd is
 * claimed and start-saved ahead of the slot in one go (docs/design.md, "The claim loop").
 */
const MOST_HELD_LOCKS_PER_WORKER = 200;
/** At most this long before its slot a run is handed over (see startAheadOf). */
const START_AHEAD_MS = 1_500;
/** After the drain deadline, how long cut-off runs get to stop and hand their slot off. */
const HANDOFF_WAIT_MS = 5_000;

/** A claimed job: its run, and Agenda's Job object (the job document and Agenda's next-run computation). */
interface EngineClaim extends ClaimedJob {
  readonly job: Job;
  readonly run: SlotRun;
}

export interface ClaimedRunsDeps {
  agenda: Agenda;
  repository: CronwardenJobRepository;
  ports: SlotRunnerPorts;
  instanceId: string;
  processEveryMs: number;
  lockLifetimeMs: number;
  maxConcurrency: number;
  clock: Clock;
  logger: Logger;
  hooks: EngineHooks;
  /** Wakes the instances for a job (PostgreSQL NOTIFY). */
  wake(job: WakeJob): Promise<void>;
  /** A claim pass or a run's start failed (the loop goes on). */
  onRunError(error: Error): void;
  /** Whether the namespace's pause-all switch is on: then a pass claims nothing (src/engine/pauseGate.ts). */
  paused?: () => boolean;
}

export interface RunsDrained {
  completed: number;
  /** Cut off at the deadline and given to other instances (handed off, or given back unstarted). */
  handedOff: string[];
  /** Still going after the hand-off wait. */
  abandoned: string[];
}

/**
 * The runs of this instance: the tasks it defines, the claim loop that locks their due jobs, and
 * each claimed job's owner (src/engine/slotRunner.ts), from the claim to the drain's cut-off. Jobs
 * of names it does not define (another service's, or a task only a newer release has) are given
 * back once, then left alone by every pass.
 */
export class ClaimedRuns {
  readonly #deps: ClaimedRunsDeps;
  readonly #loop: ClaimLoop<EngineClaim>;
  readonly #nextRunAhead = new NextRunAhead();
  readonly #definitions = new Map<string, TaskDefinition>();
  readonly #definedTasks: string[] = [];
  readonly #foreignNames = new Set<string>();
  /** The runs going, each with its owner: the drain cuts them off at its deadline. */
  readonly #runs = new Set<SlotRunner>();
  readonly lookAheadMs: number;

  /** The tasks of the runs going now. */
  runningTasks(): string[] {
    return [...this.#runs].map((owner) => owner.run.taskName);
  }

  constructor(deps: ClaimedRunsDeps) {
    this.#deps = deps;
    const { processEveryMs, lockLifetimeMs, maxConcurrency } = deps;
    const startAheadMs = startAheadOf(lockLifetimeMs);
    this.lookAheadMs = lookAheadOf(processEveryMs, startAheadMs);
    this.#loop = new ClaimLoop<EngineClaim>({
      processEveryMs,
      lookAheadMs: this.lookAheadMs,
      startAheadMs,
      maxConcurrency,
      baseClaimed: HELD_LOCKS_PER_WORKER * maxConcurrency,
      maxClaimed: MOST_HELD_LOCKS_PER_WORKER * maxConcurrency,
      lockLifetimeMs,
      clock: deps.clock,
      claim: async (request) => {
        if (deps.paused?.()) return [];
        const rows = await deps.repository.claimDue({
          until: request.until,
          limit: request.limit,
          ...(request.share ? { share: request.share } : {}),
          now: request.now,
          names: null,
          skip: this.#foreignNames.size === 0 ? request.holding : [...request.holding, ...this.#foreignNames],
          owner: deps.instanceId,
          runsHere: (name) => this.#definitions.has(name),
          givenBack: (job) =>
            this.#givenBack(job.name, String(job._id), job.nextRunAt ?? null, job.priority ?? 0),
        });
        return rows.map((row) => this.#claimed(row, request.now));
      },
      run: (claimed, turn) => this.#execute(claimed, turn),
      release: (claimed) => deps.repository.release(claimed.run),
      onStale: (claimed, waitedFor) => this.#stale(claimed, waitedFor),
      onError: (error) => deps.onRunError(error instanceof Error ? error : new Error(String(error))),
    });
  }

  get definedTasks(): readonly string[] {
    return this.#definedTasks;
  }

  /**
   * Defines a task: `handler` runs once per slot this instance claims. One job row per task, its
   * lock, and the claim loop leaving alone the names it holds keep a task to one run at a time.
   */
  define(taskName: string, handler: RunHandler, options: TaskDefinitionOptions): void {
    this.#definedTasks.push(taskName);
    this.#definitions.set(taskName, { handler, options });
    this.#foreignNames.delete(taskName);
    const agenda = this.#deps.agenda;
    // Agenda's definition names the job for Agenda's own tools; the engine runs it (SlotRunner),
    // never Agenda. Every task shares the first one: define() builds an object per name and
    // captures a stack trace for its filePath (about 90 bytes a task kept).
    const first = this.#definedTasks[0];
    const shared = first === undefined ? undefined : agenda.definitions[first];
    if (shared && shared.fn === notRunByAgenda) agenda.definitions[taskName] = shared;
    else agenda.define(taskName, notRunByAgenda, { concurrency: 1 });
  }

  start(): void {
    this.#loop.start();
  }

  /** A pass now: a notification, a release, a row given back. */
  claimNow(): void {
    this.#loop.claimNow();
  }

  /**
   * Stops claiming, frees the jobs claimed and not started, waits for the runs going up to
   * `timeoutMs`, then cuts off those still going (their slot handed to another instance) and
   * waits for them, and for the ends being saved, a little longer.
   */
  async drain(timeoutMs: number): Promise<RunsDrained> {
    const result = await this.#loop.drain(timeoutMs);
    const cutOff = [...this.#runs];
    for (const owner of cutOff) owner.cutOff();
    const { clock } = this.#deps;
    const waitUntil = clock.monotonic() + HANDOFF_WAIT_MS;
    while ((this.#runs.size > 0 || this.#deps.repository.pendingEnds > 0) && clock.monotonic() < waitUntil)
      await clock.sleep(50);
    const abandoned = [...this.#runs].map((owner) => owner.run.taskName);
    const handedOff = cutOff.map((owner) => owner.run.taskName).filter((name) => !abandoned.includes(name));
    return { completed: result.completed, handedOff, abandoned };
  }

  /** A claimed job, its run made by the claim; a run handed over before its slot starts its handler at the slot. */
  #claimed(row: ClaimedRow, now: Date): EngineClaim {
    const { job: attrs, run } = row;
    const claimed: EngineClaim = {
      id: run.jobId,
      name: attrs.name,
      dueAt: Math.max(attrs.nextRunAt?.getTime() ?? now.getTime(), now.getTime()),
      lockedAt: (attrs.lockedAt ?? now).getTime(),
      job: new Job(this.#deps.agenda, attrs, true),
      run,
    };
    this.#nextRunAhead.prepare(claimed.job, claimed.dueAt);
    if (claimed.dueAt > now.getTime()) run.startsAt(new Date(claimed.dueAt));
    if (attrs.nextRunAt) this.#deps.hooks.slotLocked?.(attrs.name, attrs.nextRunAt);
    return claimed;
  }

  /** Hands a claimed job to its run's owner, which runs it from the start save to the final save. */
  async #execute(claimed: EngineClaim, turn: RunTurn): Promise<void> {
    const definition = this.#definitions.get(claimed.name);
    if (!definition) throw new Error(`no task "${claimed.name}" is defined here`);
    const owner = new SlotRunner(claimed.run, claimed.job, definition, this.#deps.ports);
    this.#runs.add(owner);
    try {
      await owner.execute(turn);
    } finally {
      this.#runs.delete(owner);
    }
  }

  /** A claimed job whose lock expired before it started (claimLoop.ts onStale). */
  #stale(claimed: EngineClaim, waitedFor: "worker" | "slot"): void {
    if (waitedFor === "worker") {
      this.#deps.onRunError(new StaleStartError(claimed.name));
      return;
    }
    // a poll longer than the lock lifetime claims a slot earlier than its lock lasts: not a sign
    // of overload, and the loop claims the job again at once
    const { lockLifetimeMs, processEveryMs } = this.#deps;
    this.#deps.logger.debug(
      { task: claimed.name, lockLifetimeMs, processEveryMs },
      "a job claimed ahead of its slot outlived its lock; claiming it again",
    );
  }

  /** A job of a name this instance does not define was given back: left alone from now on, and its owner woken. */
  #givenBack(name: string, id: string, nextRunAt: Date | null, priority: number): void {
    this.#foreignNames.add(name);
    void this.#deps
      .wake({ id, name, nextRunAt, priority })
      .catch((error: unknown) =>
        this.#deps.logger.debug({ err: error }, "could not wake the owner of a job given back"),
      );
  }
}

/** The processor of Agenda's definitions: Agenda never runs a job here (the claim loop and SlotRunner do). */
function notRunByAgenda(): Promise<void> {
  return Promise.reject(
    new Error(
      "cronwarden runs its jobs itself (src/engine/slotRunner.ts); Agenda's processor is not started",
    ),
  );
}

/**
 * How far ahead of now a claim pass looks: one poll, plus a margin so that a poll that comes a
 * little late still finds the slots of its interval already claimed (a quarter of a poll, at most a
 * second), and that a job first claimed by a poll is still ahead of its start (twice the
 * start-ahead).
 */
function lookAheadOf(processEveryMs: number, startAheadMs: number): number {
  return processEveryMs + Math.max(Math.min(processEveryMs / 4, 1_000), 2 * startAheadMs);
}

/**
 * How long before its slot a claimed run makes its start save and checks, its handler waiting for
 * the slot (src/engine/claimLoop.ts): long enough for a herd's start saves to be made before its
 * slot, and well inside the lock's lifetime (the lock is renewed by the start save, and next by the
 * watchdog while the run waits for its slot).
 */
export function startAheadOf(lockLifetimeMs: number): number {
  return Math.min(START_AHEAD_MS, lockLifetimeMs / 10);
}

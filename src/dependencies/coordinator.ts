import type { Pool } from "pg";
import type { Clock } from "../core/clock.js";
import { decideDependency, notDoneReason, type UpstreamStanding } from "../core/dependencies/decide.js";
import type { DependencyCondition, DependencySpec, UpstreamRun } from "../core/dependencies/spec.js";
import type { Logger } from "../core/logger.js";
import { PeriodicTimer } from "../core/periodic.js";
import { retryWhileDisconnected } from "../db/retry.js";
import type { ChainSlot, EngineHooks, EngineRun, TaskDependencies } from "../engine/engineApi.js";
import type { RunLogMeta } from "../engine/runLogMeta.js";
import {
  decideWait,
  finishWait,
  openWait,
  pumpQueuedWaits,
  selectExpiredWaits,
  selectOpenWaits,
  selectRecentWaits,
  selectUpstreamOutcomes,
  selectWait,
  selectWaitsOf,
  setDependencyRow,
  startQueuedWait,
  type UpstreamSlotRow,
  type WaitRow,
} from "../engine/sql/dependencies.js";
import { type Downstream, DownstreamCache } from "./downstreamCache.js";

export interface DependencyOptions {
  pool: Pool;
  instanceId: string;
  logger: Logger;
  hooks: EngineHooks;
  /** Wakes every instance's workers for downstream rows made due (NOTIFY). */
  wake: (rows: { id: string; name: string; next_run_at: Date }[]) => void;
  /** How often expired waits are swept and queued runs made due. */
  sweepEveryMs?: number;
  /** The sweeps' shift against the poll (src/core/periodic.ts); default 0. */
  sweepPhaseMs?: number;
  /** The sweep's timer and the downstream rows' age (src/core/clock.ts). */
  clock: Clock;
}

const DEFAULT_SWEEP_MS = 1_000;
/** Open waits are decided again this often (an upstream disabled, an evaluation lost to a crash). */
const REEVALUATE_EVERY_SWEEPS = 5;
/**
 * The same for the periodic sweep, which has nothing to do without downstreams: an idle instance
 * then sends one statement every 15 s, not every 5 s (issue 19: at most 1 statement/s in all). A
 * run start still looks again after NO_DOWNSTREAMS_TTL_MS (src/dependencies/downstreamCache.ts), so its downstreams' waits open as before.
 */
const NO_DOWNSTREAMS_SWEEP_TTL_MS = 15_000;
/**
 * How long a run's dependency work (opening its downstreams' waits, deciding them) is retried while
 * the database is unreachable: as long as the run's own rows (src/engine/runRecorder.ts). A wait
 * that is never opened is a downstream slot with no run and no record: the sweeper only decides
 * waits that exist.
 */
const WORK_RETRY_MS = 10 * 60_000;

/**
 * The engine side of task dependencies (docs/dependencies.md). A downstream's job row has no
 * schedule; its runs are queued here:
 * - an upstream's run starting for slot S opens a wait per downstream (one row per downstream and
 *   slot, INSERT ... ON CONFLICT DO NOTHING);
 * - an upstream's final outcome (or skip) decides the open waits with the pure decideDependency();
 *   the decision is claimed by one UPDATE fenced on `state = 'waiting'`, so exactly one instance
 *   queues the run or records the skip;
 * - a queued wait makes the downstream's row due with `next_run_at` = S, and the run is an ordinary
 *   run of that row (lock, watchdog, liveness hand-off, crash re-run), for slot S;
 * - a sweeper skips waits past `waitAtMost` and re-decides open ones.
 */
export class DependencyCoordinator implements TaskDependencies {
  readonly #options: DependencyOptions;
  readonly #logger: Logger;
  /** Runs (by run key) whose downstreams follow this very run: a manual run with its downstreams, and their chain. */
  readonly #manualChains = new Set<string>();
  readonly #pending = new Set<Promise<unknown>>();
  #timer: PeriodicTimer | undefined;
  #stopping = false;
  #sweeps = 0;
  #sweeping = false;

  readonly #downstreams: DownstreamCache;

  constructor(options: DependencyOptions) {
    this.#options = options;
    this.#downstreams = new DownstreamCache(options.pool, options.clock);
    this.#logger = options.logger.child({ component: "dependencies" });
  }

  start(): void {
    if (this.#timer) return;
    this.#stopping = false;
    const every = this.#options.sweepEveryMs ?? DEFAULT_SWEEP_MS;
    this.#timer = new PeriodicTimer(
      every,
      (this.#options.sweepPhaseMs ?? 0) % every,
      () => {
        void this.sweep(NO_DOWNSTREAMS_SWEEP_TTL_MS);
      },
      this.#options.clock,
    );
    this.#timer.start();
  }

  /** Stops the sweeper and waits for the decisions in flight. */
  async stop(): Promise<void> {
    this.#stopping = true;
    this.#timer?.stop();
    this.#timer = undefined;
    while (this.#pending.size > 0) await Promise.allSettled([...this.#pending]);
  }

  /**
   * Before a run's handler: a downstream run for a queued slot marks its wait running and gets the
   * upstream runs it waited for (its context); a manual run asked with its downstreams is noted.
   */
  async beforeRun(
    taskName: string,
    slot: Date,
    options: { withDownstream: boolean; downstream: boolean },
  ): Promise<UpstreamRun[] | undefined> {
    const key = runKey(taskName, slot);
    if (options.withDownstream) this.#manualChains.add(key);
    if (!options.downstream) return undefined; // no statement for a task with its own cron
    const wait = await startQueuedWait(this.#options.pool, taskName, slot);
    if (!wait) return undefined;
    if (wait.manual) this.#manualChains.add(key);
    return wait.upstream_runs ?? [];
  }

  /** An upstream's run starts: its downstreams' waits for the slot open (the waitAtMost clock is the slot's). */
  runStarted(run: EngineRun): void {
    if (run.attempt !== 1 || this.#downstreams.without(run.taskName)) return;
    const key = runKey(run.taskName, run.scheduledAt);
    const chain = this.#manualChains.has(key);
    if (run.trigger !== "schedule" && !chain) return;
    this.#track(run.taskName, run.scheduledAt, () =>
      this.#openDownstreams(run.taskName, run.scheduledAt, chain),
    );
  }

  /**
   * A run's outcome row is written (src/engine/runRecorder.ts): its own wait is closed and its
   * downstreams decided. After the write, not at the handler's end: an instance deciding a fan-in
   * must find every outcome already in the run log, or the last two upstreams to finish could
   * each miss the other's.
   */
  outcomeRecorded(taskName: string, meta: RunLogMeta): void {
    const outcome = meta.outcome;
    if (outcome !== "succeeded" && outcome !== "failed" && outcome !== "skipped") return;
    const slot = meta.scheduledAt;
    if (!slot) return;
    // a downstream's run of a queued slot carries its upstream runs in its record
    const ranAsDownstream = meta.upstreams !== undefined;
    if (!ranAsDownstream && this.#manualChains.size === 0 && this.#downstreams.without(taskName)) return;
    const key = runKey(taskName, slot);
    const chain = this.#manualChains.has(key);
    this.#manualChains.delete(key);
    if (meta.trigger !== undefined && meta.trigger !== "schedule" && !chain && !ranAsDownstream) return;
    this.#track(taskName, slot, () => this.#settled(taskName, slot, outcome, chain, ranAsDownstream));
  }

  /**
   * Makes a row a downstream with `spec` or a plain row again (null), and closes, as skipped, the
   * open and queued waits of its slots that wait for an upstream the new spec no longer lists.
   */
  async setDependency(taskName: string, spec: DependencySpec | null): Promise<void> {
    const { pool } = this.#options;
    await setDependencyRow(pool, taskName, spec);
    this.#downstreams.forget();
    for (const wait of await selectWaitsOf(pool, taskName, ["waiting", "queued"])) {
      const removed = wait.upstreams.filter((name) => !spec?.upstreams.includes(name));
      if (removed.length === 0) continue;
      const reason =
        spec === null
          ? `dependency removed: ${taskName} no longer runs after ${wait.upstreams.join(", ")}`
          : `dependency removed: upstream ${removed.join(", ")} no longer in after`;
      await this.#skip(wait, "dependency_removed", reason, [], ["waiting", "queued"]);
    }
  }

  /**
   * One sweep: expired waits skipped, open waits re-decided now and then, queued runs made due.
   * `noneTtlMs`: how old a "no downstream" answer may be before it is asked again.
   */
  async sweep(noneTtlMs?: number): Promise<void> {
    if (this.#sweeping) return;
    this.#sweeping = true;
    try {
      const downstreams = await this.#downstreams.byUpstream(noneTtlMs);
      if (!downstreams.any) return;
      const { pool } = this.#options;
      for (const wait of await selectExpiredWaits(pool)) {
        const rows = await selectUpstreamOutcomes(pool, wait.upstreams, wait.slot);
        await this.#skip(
          wait,
          "upstream_not_done",
          notDoneReason(wait.wait_at_most ?? "its waitAtMost"),
          upstreamRuns(rows, wait.slot),
        );
      }
      this.#sweeps += 1;
      if (this.#sweeps % REEVALUATE_EVERY_SWEEPS === 0)
        for (const wait of await selectOpenWaits(pool, 200)) await this.#decide(wait);
      await this.#pump();
    } catch (error) {
      this.#logger.debug({ err: error }, "dependency sweep failed; the next one tries again");
    } finally {
      this.#sweeping = false;
    }
  }

  /** The chain view: recent slots' waits, with each upstream's standing. */
  async chains(query: { tasks?: string[]; limit: number }): Promise<ChainSlot[]> {
    const waits = await selectRecentWaits(this.#options.pool, query);
    return Promise.all(
      waits.map(async (wait) => {
        const rows = await selectUpstreamOutcomes(this.#options.pool, wait.upstreams, wait.slot);
        return {
          taskName: wait.task,
          scheduledAt: wait.slot,
          state: wait.state,
          upstreams: rows.map((row) => ({
            name: row.name,
            runKey: runKey(row.name, wait.slot),
            outcome: row.outcome,
            disabled: row.disabled !== false,
          })),
          condition: wait.condition,
          reason: wait.reason,
          skipKind: wait.skip_kind,
          outcome: wait.outcome,
          manual: wait.manual,
          openedAt: wait.opened_at,
          deadlineAt: wait.deadline_at,
          decidedAt: wait.decided_at,
        };
      }),
    );
  }

  async #openDownstreams(upstream: string, slot: Date, chain: boolean): Promise<Downstream[]> {
    const opened: Downstream[] = [];
    for (const downstream of (await this.#downstreams.byUpstream()).byUpstream.get(upstream) ?? []) {
      if (downstream.disabled) continue;
      const created = await openWait(this.#options.pool, {
        task: downstream.name,
        slot,
        // a manual chain follows the one run that started it, not the other upstreams
        upstreams: chain ? [upstream] : downstream.spec.upstreams,
        condition: downstream.spec.when,
        waitAtMost: downstream.spec.waitAtMost,
        waitAtMostMs: downstream.spec.waitAtMostMs,
        manual: chain,
        instance: this.#options.instanceId,
      });
      if (created) this.#options.hooks.dependencyWaitOpened?.(downstream.name, slot);
      opened.push(downstream);
    }
    return opened;
  }

  /**
   * A task settled a slot. `ranAsDownstream`: it was a downstream's run of a queued slot; its wait
   * is closed and its row may take its next queued slot. A task with neither downstreams nor
   * upstreams costs no statement here.
   */
  async #settled(
    taskName: string,
    slot: Date,
    outcome: string,
    chain: boolean,
    ranAsDownstream = false,
  ): Promise<void> {
    const { pool } = this.#options;
    if (ranAsDownstream) await finishWait(pool, taskName, slot, outcome);
    for (const downstream of await this.#openDownstreams(taskName, slot, chain)) {
      const wait = await selectWait(pool, downstream.name, slot);
      if (wait) await this.#decide(wait);
    }
    if (ranAsDownstream) await this.#pump();
  }

  async #decide(wait: WaitRow): Promise<void> {
    if (wait.state !== "waiting") return;
    const rows = await selectUpstreamOutcomes(this.#options.pool, wait.upstreams, wait.slot);
    const decision = decideDependency(
      wait.condition as DependencyCondition,
      rows.map((row) => ({ name: row.name, standing: standingOf(row) })),
    );
    if (decision.kind === "wait") return;
    const runs = upstreamRuns(rows, wait.slot);
    if (decision.kind === "skip") {
      await this.#skip(wait, decision.skip, decision.reason, runs);
      return;
    }
    const won = await decideWait(this.#options.pool, {
      task: wait.task,
      slot: wait.slot,
      instance: this.#options.instanceId,
      upstreamRuns: runs,
      state: "queued",
    });
    if (!won) return;
    this.#logger.info(
      { task: wait.task, slot: wait.slot, upstreams: runs },
      `upstreams of "${wait.task}" settled for its slot; its run is queued`,
    );
    this.#options.hooks.dependencyDecided?.({
      taskName: wait.task,
      scheduledAt: wait.slot,
      decision: "queued",
      upstreams: runs,
    });
    await this.#pump();
  }

  async #skip(
    wait: WaitRow,
    kind: Parameters<NonNullable<EngineHooks["dependencyDecided"]>>[0]["skipKind"] & string,
    reason: string,
    runs: UpstreamRun[],
    fromStates?: string[],
  ): Promise<void> {
    const won = await decideWait(this.#options.pool, {
      task: wait.task,
      slot: wait.slot,
      instance: this.#options.instanceId,
      upstreamRuns: runs,
      state: "skipped",
      reason,
      skipKind: kind,
      ...(fromStates ? { fromStates } : {}),
    });
    if (!won) return;
    this.#logger.info(
      { task: wait.task, slot: wait.slot, reason },
      `"${wait.task}" skipped for its slot: ${reason}`,
    );
    this.#options.hooks.dependencyDecided?.({
      taskName: wait.task,
      scheduledAt: wait.slot,
      decision: "skipped",
      skipKind: kind,
      reason,
      upstreams: runs,
    });
    // a skipped downstream is a settled upstream of its own downstreams
    await this.#settled(wait.task, wait.slot, "skipped", wait.manual);
  }

  async #pump(): Promise<void> {
    const rows = await pumpQueuedWaits(this.#options.pool);
    if (rows.length > 0) this.#options.wake(rows);
  }

  /**
   * Runs a task's dependency work for a slot in the background, again while the database cannot be
   * reached (a failover cuts the pool's connections after the run's own rows are written): each
   * statement is idempotent (a wait is opened ON CONFLICT DO NOTHING, decided once, fenced on its
   * state), so a retry after a lost answer changes nothing twice. Once stopping, a failed try is the last.
   */
  #track(taskName: string, slot: Date, work: () => Promise<unknown>): void {
    let tries = 0;
    const tracked = retryWhileDisconnected(
      () => {
        if (tries++ > 0 && this.#stopping)
          throw new Error("stopping: the dependency work is not tried again");
        return work();
      },
      { clock: this.#options.clock, maxElapsedMs: WORK_RETRY_MS },
    ).catch((error: unknown) =>
      this.#logger.warn(
        { err: error, task: taskName, slot },
        "could not open or decide the downstream waits of a run; an open wait is decided again by the sweeper, a wait never opened is not",
      ),
    );
    this.#pending.add(tracked);
    void tracked.finally(() => this.#pending.delete(tracked));
  }
}

function runKey(taskName: string, slot: Date): string {
  return `${taskName}@${slot.toISOString()}`;
}

function standingOf(row: UpstreamSlotRow): UpstreamStanding {
  if (row.outcome === "succeeded" || row.outcome === "failed" || row.outcome === "skipped")
    return row.outcome;
  return row.disabled === false ? "pending" : "disabled";
}

function upstreamRuns(rows: UpstreamSlotRow[], slot: Date): UpstreamRun[] {
  return rows
    .filter((row) => row.outcome !== null)
    .map((row) => ({
      name: row.name,
      runKey: runKey(row.name, slot),
      outcome: row.outcome as string,
      ...(row.traceparent ? { traceparent: row.traceparent } : {}),
    }));
}

import type { ShardFinishedEvent } from "../sharding/shardWorker.js";
import type { ShardedSlotFinishedEvent } from "../sharding/slotCoordinator.js";

export type { ShardedSlotFinishedEvent, ShardFinishedEvent };

import type { AttemptOutcome } from "../core/runTypes.js";
import type { DependencyDecisionEvent, SkippedSlots } from "../engine/engineApi.js";
import type { ReconcileResult, ReconcileTrigger } from "../reconcile/configReconciler.js";

/** The scheduler's typed events: the hook for logs, metrics, alerts and tests. */

export interface RunStartedEvent {
  taskName: string;
  scheduledAt: Date;
  startedAt: Date;
  instanceId: string;
  /** 1 for the first attempt of a slot; more for retries (each attempt is one run of the handler). */
  attempt: number;
  /** `manual` for a run requested with runNow(). */
  trigger: "schedule" | "manual" | "rerun" | "backfill";
  /** For a manual run: who asked (the admin token's name, or runNow()'s `requestedBy`). */
  requestedBy?: string;
  /** This run repeats one that died (see TaskContext.rerunOf). */
  rerun: boolean;
}

export interface RunFinishedEvent extends RunStartedEvent {
  /**
   * `interrupted`: cut off at shutdown after the drain timeout and handed to another instance,
   * which runs the slot again (`final` is false); not a failure, no alert. `lock-lost`: another
   * instance took the lock while the run went on and re-runs the slot (the `run:lock-lost` event
   * and its alert say so).
   */
  outcome: AttemptOutcome;
  durationMs: number;
  error?: Error;
  /** False when the task's retry policy follows this failed attempt with another. */
  final: boolean;
}

export interface EventLoopStallEvent {
  durationMs: number;
  /** The tasks whose runs were going on this instance when the stall ended. */
  runningTasks: string[];
}

export interface RunTroubleEvent extends RunStartedEvent {
  reason: string;
}

export interface RunRetryEvent extends RunStartedEvent {
  error: Error;
  /** The next attempt starts after this delay. */
  delayMs: number;
}

export interface MissedSlotEvent {
  taskName: string;
  /** The slot that did not start (null when the job lost its next run). */
  scheduledAt: Date | null;
  detectedAt: Date;
  reason: string;
}

/** One policy decision's skipped slots (catchUp or overlap), as the engine reports it. */
export type SlotsSkippedEvent = SkippedSlots;

/** A task paused itself after its pauseOnFailure failed slots in a row (docs/behaviour.md). */
export interface TaskPausedEvent {
  taskName: string;
  at: Date;
  /** Failed slots in a row that paused it. */
  failures: number;
  /** The slot whose failure paused it. */
  slot: Date | null;
  /** The last error's first line (redacted). */
  lastError: string | null;
}

export interface ConfigRejectedEvent {
  taskName: string | undefined;
  reason: string;
  revision: string;
}

export interface ConfigErrorEvent {
  source: string;
  error: Error;
}

/** The typed events a scheduler emits; the hook for logs, metrics and tests. */
export interface SchedulerEvents {
  /** This instance locked a task's job for a slot, possibly ahead of it: its run starts at the slot. */
  "slot:locked": [{ taskName: string; scheduledAt: Date }];
  "run:started": [RunStartedEvent];
  "run:finished": [RunFinishedEvent];
  /**
   * Another instance took a run's lock (or it could not be renewed for a lifetime): the run's signal
   * fired, and it is recorded `lock-lost` (the lock's new holder re-runs the slot).
   */
  "run:lock-lost": [RunTroubleEvent];
  /** The event loop was blocked for at least the stall threshold (logged once per stall, when it ends). */
  "event-loop:stall": [EventLoopStallEvent];
  /** A timed-out handler ignored its signal past the grace period; its lock was released. */
  "run:abandoned": [RunTroubleEvent];
  /** An attempt failed and the task's retry policy schedules another. */
  "run:retry": [RunRetryEvent];
  /** The watchdog renewed a running job's lock. */
  "lock:renewed": [{ taskName: string }];
  /** An enabled task's slot passed its grace without a run starting (silent-stop detection). */
  "missed-slot": [MissedSlotEvent];
  /** Missed slots skipped by a task's catchUp policy (one event per decision, docs/behaviour.md). */
  "slots:skipped": [SlotsSkippedEvent];
  /**
   * A task paused itself after its pauseOnFailure failed slots in a row: emitted once per pause,
   * by the instance whose save of the last failed slot paused it.
   */
  "task:paused": [TaskPausedEvent];
  reconciled: [ReconcileResult];
  "reconcile:failed": [{ error: Error; trigger: ReconcileTrigger }];
  /** A config entry was refused (invalid or unknown name); the task keeps its previous state. */
  "config:rejected": [ConfigRejectedEvent];
  /** The config source could not be read or parsed (unreachable, malformed); the last valid snapshot stays. */
  "config:error": [ConfigErrorEvent];
  /** A config version was read and validated. */
  "config:loaded": [{ revision: string; valid: number; rejected: number }];
  /** A downstream started waiting for its upstreams' slot (docs/dependencies.md); one instance emits it. */
  "dependency:wait": [{ taskName: string; scheduledAt: Date }];
  /** A downstream's slot was decided, by this instance: its run queued, or skipped with the reason. */
  "dependency:decided": [DependencyDecisionEvent];
  /** A shard of a sharded slot ended on this instance, its end recorded (docs/sharding.md). */
  "shard:finished": [ShardFinishedEvent];
  /** A sharded slot ended (after its reduce), by the instance that coordinated it: its derived outcome. */
  "sharded-slot:finished": [ShardedSlotFinishedEvent];
}

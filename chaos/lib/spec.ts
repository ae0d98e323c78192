/** What the chaos orchestrator (chaos/run.ts) and its instances (chaos/instance.ts) share. */

export interface InstanceSpec {
  /** i1, i2, i3: the slot in the fleet; the instance id is `${label}:${pid}`. */
  label: string;
  databaseUrl: string;
  configFile: string;
  journalFile: string;
  /** The sharded task's journal: its shards' and reduce's starts and ends (chaos/lib/shardCheck.ts). */
  shardJournalFile?: string;
  logFile: string;
  taskCount: number;
  seed: number;
  minIntervalMs: number;
  processEveryMs: number;
  lockLifetimeMs: number;
  maxConcurrency: number;
  healthProbeMs: number;
  drainTimeoutMs: number;
  poolMax: number;
  /** Handlers take between 0 and this many ms. */
  maxTaskMs: number;
  /** The first this many tasks are long runs instead: each takes `longTaskMs` (default none). */
  longTaskCount?: number;
  longTaskMs?: number;
}

/** Which handler run a journal line is about. */
interface JournalRun {
  task: string;
  /** ctx.scheduledAt, ISO. */
  slot: string;
  instance: string;
  pid: number;
  attempt: number;
  /** epoch ms */
  at: number;
}

/** One line of an instance's journal: a handler was entered, or it returned or threw. */
export type JournalLine =
  | (JournalRun & {
      event: "start";
      /** ctx.rerunOf.scheduledAt (ISO; "unknown" when the dead run's slot was not known), null for a first run. */
      rerunOf: string | null;
    })
  | (JournalRun & {
      event: "end";
      /** null: the handler returned; else the error it threw (its signal fired). */
      error: string | null;
    });

export function taskNameOf(index: number): string {
  return `chaos-${String(index).padStart(3, "0")}`;
}

/** The chaos run's sharded task (docs/sharding.md): static shards from its config entry, with a reduce. */
export const SHARDED_TASK = "chaos-sharded";
export const SHARD_COUNT = 30;
/** A shard's handler takes 0 to this many ms (from the seed, the slot and the shard). */
export const MAX_SHARD_MS = 1_000;

/** One line of an instance's shard journal: a shard's handler or the reduce was entered, or it ended. */
export interface ShardJournalLine {
  event: "shard-start" | "shard-end" | "reduce-start" | "reduce-end";
  task: string;
  /** ctx.scheduledAt, ISO. */
  slot: string;
  /** The shard's index; -1 for the reduce. */
  index: number;
  instance: string;
  pid: number;
  at: number;
  /** On an end: null when it returned, else the error it threw. */
  error?: string | null;
  /** On a reduce's start: how many results it got. */
  results?: number;
}

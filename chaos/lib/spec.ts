/** What the chaos orchestrator (chaos/run.ts) and its instances (chaos/instance.ts) share. */

export interface InstanceSpec {
  /** i1, i2, i3: the slot in the fleet; the instance id is `${label}:${pid}`. */
  label: string;
  databaseUrl: string;
  configFile: string;
  journalFile: string;
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

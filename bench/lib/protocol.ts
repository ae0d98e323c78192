/**
 * What the bench orchestrator (bench/run.ts) and its worker processes (bench/workers/*.ts) say to
 * each other over the Node IPC channel. Every timestamp is `Date.now()` in the sending process
 * (one machine, one clock).
 */

/** How a contender worker is set up; passed as JSON in the BENCH_SPEC environment variable. */
export interface ContenderSpec {
  /** Names this process in messages and logs. */
  label: string;
  databaseUrl: string;
  /** Task names are `${prefix}${index}` (index zero-padded to 5 digits), `count` of them. */
  tasks: { prefix: string; count: number; cron: string };
  /** Poll interval; absent: the contender's own default (both: 5 s for a minute cron). */
  processEveryMs?: number;
  /** Absent: the contender's own default (cronwarden 15 s, raw Agenda 10 min). */
  lockLifetimeMs?: number;
  /** cronwarden only: shortest allowed gap of a schedule; absent: its default (60 s). */
  minIntervalMs?: number;
  /** How long each handler runs (0: returns at once). */
  taskMs: number;
  /** cronwarden only: runs at once per process; absent: its default (20). */
  maxConcurrency?: number;
  poolMax: number;
  /** cronwarden only: the desired-state file (written by the orchestrator). */
  configFile?: string;
  /** cronwarden only: where its JSON log lines go (level info, as a service would log). */
  logFile?: string;
  /** cronwarden only: the module to import the API from (file: URL of dist/index.js); absent: src/index.ts. */
  cronwardenEntry?: string;
  /**
   * cronwarden only: the tasks' handler is this module's (absolute path), run with `isolation:
   * "worker"` (docs/isolation.md); absent: an in-process handler function.
   */
  isolatedModule?: string;
  /**
   * cronwarden only (bench/scenarios/sharding.ts): registers "sharded" (its shards from the config's
   * `shards:`) and "mapped" (a map of `mapItems` items), each shard taking `shardMs`, each with a
   * reduce that inserts a row into `bench_reduces`.
   */
  sharding?: { shardMs: number; mapItems: number };
}

/** The reconcile worker's setup (cronwarden only). */
export interface ReconcileSpec {
  databaseUrl: string;
  count: number;
  /** A folder of its own for the config file and the log. */
  workDir: string;
  poolMax: number;
  /** How many single-entry edits are timed for config write -> next_run_at stored. */
  edits: number;
}

export interface ReconcileFigures {
  count: number;
  /** parseDesiredState() of the whole document: what each config load costs before a reconcile. */
  validateMs: number;
  /** scheduler.start() on an empty database, total (schema, define, read config, reconcile, workers). */
  startMs: number;
  /** Why that start failed, if it did. */
  startError: string | null;
  /** After a failed start: a second start on the same database (a supervisor's restart). */
  restartMs: number | null;
  jobsAfterStart: number;
  /** First reconcile on an empty database: `config:loaded` -> `reconciled` (or `reconcile:failed`). */
  coldMs: number;
  coldChanges: number;
  coldError: string | null;
  /** Every cron changed: `config:loaded` -> `reconciled` (or `reconcile:failed`). */
  changeMs: number;
  /** The same, from the file write. */
  changeFromWriteMs: number;
  /** File write -> `config:loaded`: debounce (200 ms), read, parse and validate. */
  changeLoadMs: number;
  /** Longest event-loop stall during the change (no polls, no lock renewals meanwhile). */
  changeBlockedMs: number;
  changeChanges: number;
  changeError: string | null;
  /** Job rows holding the new cron right after the change's reconcile ended. */
  changeStored: number;
  /** After a failed change: what the watcher's retry 5 s later applied. */
  changeRetryApplied: number | null;
  /** Same tasks, new revision: `config:loaded` -> `reconciled`. */
  noopMs: number;
  noopChanges: number;
  /** One entry edited: file write (rename) -> the row's new cron and next_run_at readable in PostgreSQL. */
  configToStoredMs: number[];
  /** Rows in the audit trail at the end. */
  auditRows: number;
}

/** One instance of the scale scenario (bench/scenarios/scale.ts). */
export interface ScaleSpec {
  label: string;
  databaseUrl: string;
  configFile: string;
  /** Task names registered (the config file's). */
  names: { prefix: string; count: number };
  poolMax: number;
  logFile: string;
  /** file: URL of the compiled package (plain node); absent: the source under tsx. */
  cronwardenEntry?: string;
}

export type WorkerMessage =
  | { type: "ready"; label: string; pid: number; at: number; setupMs: number }
  | {
      type: "start";
      label: string;
      pid: number;
      task: string;
      /** The slot this run is for (cronwarden: ctx.scheduledAt; Agenda: next_run_at of the row it locked). */
      slot: number | null;
      at: number;
      rerun: boolean;
    }
  | { type: "finish"; label: string; pid: number; task: string; at: number; error: string | null }
  | { type: "reconcile"; figures: ReconcileFigures }
  /** The scale scenario's instances (bench/workers/scale.ts): each config load and reconcile, by its process's clock. */
  | {
      type: "scale";
      label: string;
      pid: number;
      kind: "loaded" | "reconciled" | "failed";
      revision: string;
      trigger: string | null;
      applied: number | null;
      at: number;
      message: string | null;
    }
  /** An error the scheduler reported outside a handler (raw Agenda: its `error` event). */
  | { type: "engine-error"; label: string; pid: number; at: number; message: string }
  | { type: "stopped"; label: string; pid: number }
  | { type: "fatal"; label: string; pid: number; message: string };

export type ParentMessage = { type: "stop" };

export function taskName(prefix: string, index: number): string {
  return `${prefix}${String(index).padStart(5, "0")}`;
}

export function readSpec<T>(): T {
  const text = process.env.BENCH_SPEC;
  if (!text) throw new Error("BENCH_SPEC is not set: workers are started by bench/run.ts");
  return JSON.parse(text) as T;
}

/** What goes over the IPC channel: one message, or the starts and ends of a short while in one. */
export type WireMessage = WorkerMessage | { type: "batch"; messages: WorkerMessage[] };

/**
 * How long a worker collects handler starts and ends before it sends them. One IPC send per
 * start cost the measured process more than its scheduler did at a herd; each message keeps the
 * time it happened (`at`), so the wait does not change any figure. A worker killed with SIGKILL
 * loses the reports of its last 20 ms: the failover scenario kills a worker seconds after its
 * last start (bench/scenarios/failover.ts).
 */
const REPORT_BATCH_MS = 20;
const reports: WorkerMessage[] = [];
let reportTimer: NodeJS.Timeout | undefined;

/** Sends to the orchestrator; a worker without a parent (it died) has nothing left to do. */
export function send(message: WorkerMessage): void {
  if (!process.send || !process.connected) return;
  if (message.type === "start" || message.type === "finish") {
    reports.push(message);
    reportTimer ??= setTimeout(sendReports, REPORT_BATCH_MS);
    return;
  }
  // anything else (ready, fatal, stopped) goes at once, after the reports before it
  sendReports();
  process.send(message);
}

function sendReports(): void {
  clearTimeout(reportTimer);
  reportTimer = undefined;
  if (reports.length === 0 || !process.send || !process.connected) return;
  process.send({ type: "batch", messages: reports.splice(0) } satisfies WireMessage);
}

/** Workers end when the orchestrator goes away, whatever the reason (crash, SIGKILL). */
export function exitWithParent(): void {
  process.on("disconnect", () => process.exit(0));
}

/** What every scenario gets, and small helpers they share. */
import { rename, writeFile } from "node:fs/promises";
import path from "node:path";
import { Worker } from "./children.js";
import { type PlainNode, preparePlainNode } from "./plainNode.js";
import type { BenchPostgres } from "./postgres.js";
import { type ContenderSpec, taskName } from "./protocol.js";

export type Contender = "cronwarden" | "agenda";
export const CONTENDERS: Contender[] = ["cronwarden", "agenda"];

export interface Sizes {
  latenessSlots: number;
  /** Lateness at default settings (`* * * * *`): processes per contender, boundaries each. */
  latenessMinuteProcesses: number;
  latenessMinuteBoundaries: number;
  herdTasks: number;
  /** The herd shared by 3 processes on one database (scenario herd-3). */
  herdSharedTasks: number;
  /** Task counts of the idle scenario, keyed by the figure they report (100, 1000, 10000). */
  idle: { 100: number; 1000: number; 10000: number };
  idleWindowMs: number;
  /**
   * Quick mode: idle workers of every size and both contenders at once, and the failover scenario
   * at the same time; full mode: one idle worker at a time, and failover after idle.
   */
  idleConcurrent: boolean;
  failoverTrials: number;
  failoverTaskMs: number;
  /** How long to keep watching after the slot that follows the killed one started. */
  failoverObserveMs: number;
  failoverProcesses: number;
  /** Tasks of the rolling-restart scenario (due every 10 s). */
  rollingTasks: number;
  reconcileTasks: number;
  reconcileEdits: number;
  /** Which idle size's process the memory figure is read from (10000 in full mode). */
  memoryTasks: number;
  /** Run-log records the search scenario loads (10 million in full mode). */
  searchRows: number;
  /** Backfill: slots of one task's past, at concurrency 10 on 3 processes, one SIGKILLed midway. */
  backfillSlots: number;
  /** Pause all: tasks shared by 3 processes (bench/scenarios/pauseAll.ts). */
  pauseTasks: number;
  /** Scale: tasks on 3 instances (bench/scenarios/scale.ts), and how many single-entry edits are timed. */
  scaleTasks: number;
  scaleEdits: number;
}

export const FULL: Sizes = {
  latenessSlots: 60,
  latenessMinuteProcesses: 6,
  latenessMinuteBoundaries: 6,
  herdTasks: 1000,
  herdSharedTasks: 10_000,
  idle: { 100: 100, 1000: 1000, 10000: 10000 },
  idleWindowMs: 60_000,
  idleConcurrent: false,
  failoverTrials: 3,
  failoverTaskMs: 40_000,
  failoverObserveMs: 45_000,
  failoverProcesses: 3,
  rollingTasks: 50,
  reconcileTasks: 10_000,
  reconcileEdits: 3,
  memoryTasks: 10_000,
  searchRows: 10_000_000,
  backfillSlots: 1000,
  pauseTasks: 1000,
  scaleTasks: 100_000,
  scaleEdits: 5,
};

export const QUICK: Sizes = {
  latenessSlots: 30,
  latenessMinuteProcesses: 3,
  latenessMinuteBoundaries: 2,
  herdTasks: 200,
  herdSharedTasks: 2000,
  idle: { 100: 100, 1000: 1000, 10000: 2000 },
  idleWindowMs: 20_000,
  idleConcurrent: true,
  failoverTrials: 1,
  failoverTaskMs: 30_000,
  failoverObserveMs: 10_000,
  failoverProcesses: 2,
  rollingTasks: 20,
  reconcileTasks: 1000,
  reconcileEdits: 3,
  memoryTasks: 1000,
  searchRows: 500_000,
  backfillSlots: 200,
  pauseTasks: 200,
  scaleTasks: 10_000,
  scaleEdits: 3,
};

/** Settings shared by both contenders: cronwarden's defaults (Agenda's own poll default is also 5 s). */
export const DEFAULT_PROCESS_EVERY_MS = 5_000;
export const LOCK_LIFETIME_MS = 15_000;
export const POOL_MAX = 10;

export interface BenchContext {
  pg: BenchPostgres;
  /** The temp dir of this bench run (PostgreSQL, configs, logs). */
  dir: string;
  logDir: string;
  quick: boolean;
  sizes: Sizes;
  /** Node options of the contender workers, which run under plain node (`--node-flags=`); none by default. */
  nodeFlags: string[];
  progress(message: string): void;
}

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, Math.max(0, ms)));

/**
 * A daily 5-field cron at `minute` past the hour twelve hours from now (UTC): never due while
 * the bench runs. Daily rather than yearly (`0 0 1 1 *`): cronwarden validates each entry by
 * sampling 64 occurrences, which costs ~4.5 ms for a daily cron and ~26 ms for a yearly one.
 */
export function farDailyCron(minute = 0): string {
  const hour = (new Date().getUTCHours() + 12) % 24;
  return `${minute % 60} ${hour} * * *`;
}

/** A 6-field cron (seconds first) that fires once a day, at `at` (whole second, UTC). */
export function dailyCronAt(at: Date): string {
  return `${at.getUTCSeconds()} ${at.getUTCMinutes()} ${at.getUTCHours()} * * *`;
}

/** The first whole second at least `marginMs` from now. */
export function boundaryAfter(marginMs: number): Date {
  return new Date(Math.ceil((Date.now() + marginMs) / 1000) * 1000);
}

/** Writes a cronwarden desired-state file (JSON) atomically. */
export async function writeTasksFile(
  file: string,
  tasks: { prefix: string; count: number; cron: string },
): Promise<void> {
  const document = {
    tasks: Array.from({ length: tasks.count }, (_, index) => ({
      name: taskName(tasks.prefix, index),
      enabled: true,
      cron: tasks.cron,
    })),
  };
  await writeFile(`${file}.tmp`, JSON.stringify(document));
  await rename(`${file}.tmp`, file);
}

/**
 * Starts one contender process on `databaseUrl`. For cronwarden, `configFile` must already hold
 * the tasks (see writeTasksFile); raw Agenda creates its jobs with `agenda.every`.
 */
export function startContender(
  context: BenchContext,
  contender: Contender,
  label: string,
  spec: Omit<ContenderSpec, "label" | "logFile" | "poolMax" | "lockLifetimeMs"> & {
    /** Absent: LOCK_LIFETIME_MS; null: not passed, the contender's own default. */
    lockLifetimeMs?: number | null;
    /** Run under plain node, cronwarden from dist/ (bench/lib/plainNode.ts; prepareContender's launchers pass it); absent: tsx on the source. */
    plainNode?: PlainNode;
  },
): Worker {
  const { plainNode, ...rest } = spec;
  const full: ContenderSpec = {
    ...rest,
    label,
    poolMax: POOL_MAX,
    lockLifetimeMs: rest.lockLifetimeMs === null ? undefined : (rest.lockLifetimeMs ?? LOCK_LIFETIME_MS),
    logFile: path.join(context.logDir, `${label}.log`),
    ...(plainNode && contender === "cronwarden" ? { cronwardenEntry: plainNode.cronwardenEntry } : {}),
  };
  return new Worker({
    label,
    worker: contender,
    spec: full,
    logDir: context.logDir,
    ...(plainNode ? { plainNodeDir: plainNode.dir, nodeFlags: context.nodeFlags } : {}),
  });
}

export type TasksSpec = ContenderSpec["tasks"];
export type LaunchSpec = Omit<Parameters<typeof startContender>[3], "databaseUrl" | "tasks" | "configFile">;

/**
 * A contender's own database and, for cronwarden, its desired-state file holding `tasks`.
 * Returns a launcher for its worker processes, with the database, tasks and file filled in.
 */
export async function prepareContender(
  context: BenchContext,
  contender: Contender,
  database: string,
  tasks: TasksSpec,
): Promise<(label: string, spec: LaunchSpec) => Worker> {
  const databaseUrl = await context.pg.createDatabase(database);
  const configFile = path.join(context.dir, `${database}.json`);
  if (contender === "cronwarden") await writeTasksFile(configFile, tasks);
  // what users run: the compiled package under plain node, for both contenders
  const plainNode = await preparePlainNode(context.dir, context.progress);
  return (label, spec) =>
    startContender(context, contender, label, { plainNode, ...spec, databaseUrl, tasks, configFile });
}

/** Linear interpolation between closest ranks (numpy's default); NaN when empty. */
export function percentile(values: number[], p: number): number {
  if (values.length === 0) return Number.NaN;
  const sorted = [...values].sort((a, b) => a - b);
  const rank = (p / 100) * (sorted.length - 1);
  const low = Math.floor(rank);
  const high = Math.ceil(rank);
  const lowValue = sorted[low] ?? Number.NaN;
  const highValue = sorted[high] ?? Number.NaN;
  return lowValue + (highValue - lowValue) * (rank - low);
}

export function median(values: number[]): number {
  return percentile(values, 50);
}

export function round(value: number | null | undefined, digits = 0): number | null {
  if (value === null || value === undefined || !Number.isFinite(value)) return null;
  const factor = 10 ** digits;
  return Math.round(value * factor) / factor;
}

/** Waits until `deadline` (ms since epoch). */
export function sleepUntil(deadline: number): Promise<void> {
  return sleep(deadline - Date.now());
}

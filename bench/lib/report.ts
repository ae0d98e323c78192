/** The bench's output: a markdown report and one line of JSON. */

import type { BackfillFigures } from "../scenarios/backfill.js";
import type { FailoverTrial } from "../scenarios/failover.js";
import type { HerdFigures } from "../scenarios/herd.js";
import type { IdleResult } from "../scenarios/idle.js";
import type { IsolationFigures } from "../scenarios/isolation.js";
import { LATENESS_POLLS, type LatenessFigures, type LatenessResult } from "../scenarios/lateness.js";
import {
  MINUTE_LATE_MS,
  type MinuteLatenessFigures,
  type MinuteLatenessResult,
} from "../scenarios/latenessMinute.js";
import type { PauseAllFigures } from "../scenarios/pauseAll.js";
import type { RollingFigures } from "../scenarios/rolling.js";
import type { ScaleFigures } from "../scenarios/scale.js";
import type { SearchFigures } from "../scenarios/search.js";
import { type ShardingFigures, shardingRows } from "../scenarios/sharding.js";
import type { FloorFigures, TimerFloorFigures } from "../scenarios/timerFloor.js";
import {
  type Contender,
  DEFAULT_PROCESS_EVERY_MS,
  LOCK_LIFETIME_MS,
  median,
  POOL_MAX,
  round,
  type Sizes,
} from "./common.js";
import type { Machine } from "./machine.js";
import type { ReconcileFigures } from "./protocol.js";

export interface Results {
  lateness?: LatenessResult;
  /** `* * * * *` at each contender's default settings, processes started at random seconds. */
  latenessMinute?: MinuteLatenessResult;
  /** Bare node timers in as many processes as lateness-minute runs: the machine's floor under it. */
  latenessFloor?: TimerFloorFigures;
  herd?: Record<Contender, HerdFigures>;
  herdShared?: Record<Contender, HerdFigures>;
  /** cronwarden only: the shared herd on one process, with its RSS (bench/scenarios/herd.ts runHerdMemory). */
  herdMemory?: HerdFigures;
  idle?: IdleResult;
  failover?: Record<Contender, FailoverTrial[]>;
  /** The failover trial with SIGSTOP (a lingering session), once per contender. */
  partition?: Record<Contender, FailoverTrial>;
  /** cronwarden only: at the default concurrency, and tuned. */
  rolling?: RollingFigures;
  rollingTuned?: RollingFigures;
  reconcile?: ReconcileFigures;
  /** config write -> stored with a small (10-task) config, for contrast. */
  reconcileSmall?: ReconcileFigures;
  /** cronwarden only: isolated handlers against in-process ones (docs/isolation.md). */
  isolation?: IsolationFigures;
  /** cronwarden only: the run search over a large run log (bench/scenarios/search.ts). */
  search?: SearchFigures;
  /** cronwarden only: a backfill with one process SIGKILLed midway. */
  backfill?: BackfillFigures;
  /** cronwarden only: the pause-all switch reaching 3 processes. */
  pauseAll?: PauseAllFigures;
  /** cronwarden only: many tasks on 3 instances (bench/scenarios/scale.ts). */
  scale?: ScaleFigures;
  /** cronwarden only: sharded tasks (issue 48's goals). */
  sharding?: ShardingFigures;
}

type Figure = number | null;

/** The JSON's lateness figures: the 500 ms poll, stable (see bench/scenarios/lateness.ts). */
const MAIN_LATENESS_POLL_MS = 500;

function failoverFigures(trials: FailoverTrial[] | undefined): { seconds: Figure; duplicates: Figure } {
  if (!trials || trials.length === 0) return { seconds: null, duplicates: null };
  const seconds = trials.map((trial) => trial.failoverS).filter((value): value is number => value !== null);
  return {
    seconds: seconds.length === trials.length ? round(median(seconds), 1) : null,
    duplicates: trials.reduce((sum, trial) => sum + trial.duplicates, 0),
  };
}

function contenderFigures(results: Results, contender: Contender, memoryTasks: number) {
  const lateness = results.lateness?.[MAIN_LATENESS_POLL_MS]?.[contender];
  const minute = results.latenessMinute?.[contender];
  const herd = results.herd?.[contender];
  const shared = results.herdShared?.[contender];
  const idle = results.idle?.[contender];
  const failover = failoverFigures(results.failover?.[contender]);
  const memory = Object.values(idle ?? {}).find((figures) => figures?.tasks === memoryTasks);
  return {
    lateness_p50_ms: round(lateness?.p50, 1),
    lateness_p99_ms: round(lateness?.p99, 1),
    lateness_minute_boundaries: minute?.boundaries ?? null,
    lateness_minute_p50_ms: round(minute?.p50, 1),
    lateness_minute_p99_ms: round(minute?.p99, 1),
    lateness_minute_max_ms: round(minute?.max, 1),
    lateness_minute_late_50ms: minute?.late ?? null,
    lateness_minute_missed: minute?.missed ?? null,
    lateness_minute_duplicates: minute?.duplicates ?? null,
    herd_tasks: herd?.tasks ?? null,
    herd_runs: herd?.runs ?? null,
    herd_last_ms: round(herd?.lastMs),
    herd_cpu_ms_per_run_node: round(herd?.cpuMsPerRun?.node, 3),
    herd_cpu_ms_per_run_postgres: round(herd?.cpuMsPerRun?.postgres, 3),
    herd3_tasks: shared?.tasks ?? null,
    herd3_runs: shared?.runs ?? null,
    herd3_wrong_tasks: shared?.wrongTasks ?? null,
    herd3_last_ms: round(shared?.lastMs),
    herd3_cpu_ms_per_run_node: round(shared?.cpuMsPerRun?.node, 3),
    herd3_cpu_ms_per_run_postgres: round(shared?.cpuMsPerRun?.postgres, 3),
    idle_tps_100: round(idle?.[100]?.tps, 1),
    idle_tps_1000: round(idle?.[1000]?.tps, 1),
    idle_tps_10000: round(idle?.[10000]?.tps, 1),
    failover_s: failover.seconds,
    failover_duplicates: failover.duplicates,
    rss_mb_10000: round(memory?.rssMb, 1),
  };
}

export function jsonLine(results: Results, sizes: Sizes, quick: boolean, commit: string): string {
  const cw = contenderFigures(results, "cronwarden", sizes.memoryTasks);
  const agenda = contenderFigures(results, "agenda", sizes.memoryTasks);
  const reconcile = results.reconcile;
  const figures: Record<string, unknown> = {
    ...cw,
    reconcile_cold_ms_10000: reconcile?.coldError ? null : round(reconcile?.coldMs),
    reconcile_change_ms_10000: reconcile?.changeError ? null : round(reconcile?.changeMs),
    reconcile_noop_ms_10000: round(reconcile?.noopMs),
    config_to_stored_ms: round(reconcile ? median(reconcile.configToStoredMs) : null),
    search_p95_ms: round(results.search?.overall.p95, 1),
  };
  for (const [key, value] of Object.entries(agenda)) figures[`${key}_agenda`] = value;
  for (const key of [
    "reconcile_cold_ms_10000",
    "reconcile_change_ms_10000",
    "reconcile_noop_ms_10000",
    "config_to_stored_ms",
    "search_p95_ms",
  ])
    figures[`${key}_agenda`] = null;
  const failures: Record<string, { ms: number | null; error: string }> = {};
  if (reconcile?.coldError) failures.cold = { ms: round(reconcile.coldMs), error: reconcile.coldError };
  if (reconcile?.changeError)
    failures.change = { ms: round(reconcile.changeMs), error: reconcile.changeError };
  const restarts = Object.entries(results.idle ?? {}).flatMap(([contender, bySize]) =>
    Object.values(bySize ?? {})
      .filter((figure) => figure?.firstStartError)
      .map((figure) => `${contender} ${figure?.tasks}: ${figure?.firstStartError}`),
  );
  if (Object.keys(failures).length > 0) figures.reconcile_failed = failures;
  if (restarts.length > 0) figures.idle_first_start_failed = restarts;
  const poll1000 = results.lateness?.[1000];
  figures.lateness_poll1000 = poll1000
    ? {
        p50_ms: round(poll1000.cronwarden.p50, 1),
        p99_ms: round(poll1000.cronwarden.p99, 1),
        late_slots: poll1000.cronwarden.late,
        p50_ms_agenda: round(poll1000.agenda.p50, 1),
        p99_ms_agenda: round(poll1000.agenda.p99, 1),
        late_slots_agenda: poll1000.agenda.late,
      }
    : null;
  figures.partition_s = round(results.partition?.cronwarden.failoverS, 1);
  figures.partition_s_agenda = round(results.partition?.agenda.failoverS, 1);
  const floor = results.latenessFloor;
  const floorJson = (figures: FloorFigures) => ({
    processes: figures.processes,
    boundaries: figures.boundaries,
    p50_ms: round(figures.p50, 1),
    p99_ms: round(figures.p99, 1),
    max_ms: round(figures.max, 1),
  });
  figures.lateness_floor = floor
    ? { ...floorJson(floor.fromIdle), engine_wait: floorJson(floor.engineWait) }
    : null;
  figures.rolling = rollingJson(results.rolling);
  const isolation = results.isolation;
  figures.isolation = isolation
    ? {
        dispatch_median_ms: Object.fromEntries(
          Object.entries(isolation.dispatch).map(([mode, each]) => [mode, each.medianMs]),
        ),
        herd_last_ms: {
          none: round(isolation.herd.none.lastMs),
          worker: round(isolation.herd.worker.lastMs),
        },
      }
    : null;
  figures.rolling_tuned = rollingJson(results.rollingTuned);
  figures.backfill = results.backfill ?? null;
  figures.pause_all = results.pauseAll ?? null;
  figures.scale = results.scale ?? null;
  figures.herd_memory = results.herdMemory
    ? {
        tasks: results.herdMemory.tasks,
        runs: results.herdMemory.runs,
        wrong_tasks: results.herdMemory.wrongTasks,
        last_ms: round(results.herdMemory.lastMs),
        rss_mb_after_herd: results.herdMemory.rssMb?.afterHerd ?? null,
        rss_mb_idle: results.herdMemory.rssMb?.idle ?? null,
      }
    : null;
  figures.sharding = results.sharding ?? null;
  figures.mode = quick ? "quick" : "full";
  figures.commit = commit;
  figures.sizes = {
    lateness_slots: sizes.latenessSlots,
    lateness_poll_ms: MAIN_LATENESS_POLL_MS,
    lateness_minute_processes: sizes.latenessMinuteProcesses,
    lateness_minute_boundaries_per_process: sizes.latenessMinuteBoundaries,
    herd_tasks: sizes.herdTasks,
    herd3_tasks: sizes.herdSharedTasks,
    idle_tasks: sizes.idle,
    idle_window_s: sizes.idleWindowMs / 1000,
    failover_trials: sizes.failoverTrials,
    failover_processes: sizes.failoverProcesses,
    failover_task_s: sizes.failoverTaskMs / 1000,
    rolling_tasks: sizes.rollingTasks,
    reconcile_tasks: sizes.reconcileTasks,
    rss_tasks: sizes.memoryTasks,
    scale_tasks: sizes.scaleTasks,
  };
  return JSON.stringify(figures);
}

const show = (value: number | null | undefined, digits = 0): string => {
  const rounded = round(value, digits);
  return rounded === null ? "–" : rounded.toFixed(digits);
};

const failedNote = (error: string | null) => (error ? ` **failed**: ${error}` : "");

type Row = (...cells: string[]) => void;

export function markdown(options: {
  results: Results;
  machine: Machine;
  sizes: Sizes;
  quick: boolean;
  /** Options of the plain-node idle/memory workers. */
  nodeFlags: string[];
  loadAfter: number[];
  /** codeVersion() when the run ended. */
  commitAfter: string;
  elapsedS: number;
  startedAt: Date;
}): string {
  const { results, machine, sizes, quick } = options;
  const lines: string[] = [];
  const row: Row = (...cells) => lines.push(`| ${cells.join(" | ")} |`);
  lines.push(`## cronwarden vs raw Agenda (${quick ? "quick" : "full"} mode)`, "");
  lines.push(
    `- Machine: ${machine.cpu}, ${machine.cores} cores, ${machine.ramGb} GB RAM, ${machine.kernel}`,
    `- Versions: Node ${machine.node}, PostgreSQL ${machine.postgres} (embedded, default settings), Agenda ${machine.agenda}, @agendajs/postgres-backend ${machine.postgresBackend}, cronwarden ${machine.cronwarden} at ${machine.commit}${options.commitAfter === machine.commit ? "" : ` (**the code changed during the run**: ${options.commitAfter} at the end)`}`,
    `- Run: ${options.startedAt.toISOString()}, ${Math.round(options.elapsedS)} s; load average before ${machine.loadBefore.join(" / ")}, after ${options.loadAfter.map((load) => load.toFixed(2)).join(" / ")}`,
    `- Settings (both contenders): pg pool max ${POOL_MAX}; lock lifetime ${LOCK_LIFETIME_MS / 1000} s; poll (processEvery) ${DEFAULT_PROCESS_EVERY_MS / 1000} s, except lateness (1 s and 0.5 s); lateness at defaults: nothing passed but the pool (both poll every 5 s; lock lifetime 15 s cronwarden, 10 min raw Agenda); everything else at each one's defaults (raw Agenda: maxConcurrency 20, defaultConcurrency 5, no job log; cronwarden: JSON log lines at info to a file)`,
    `- Runtime: every contender process under plain \`node${options.nodeFlags.length > 0 ? ` ${options.nodeFlags.join(" ")}` : ""}\` (cronwarden from the compiled package, dist/; raw Agenda from its own)`,
    `- Sizes: lateness ${sizes.latenessSlots} slots; lateness at defaults ${sizes.latenessMinuteProcesses} processes x ${sizes.latenessMinuteBoundaries} boundaries per contender; herd ${sizes.herdTasks} tasks; idle ${sizes.idle[100]} / ${sizes.idle[1000]} / ${sizes.idle[10000]} tasks, ${sizes.idleWindowMs / 1000} s window${sizes.idleConcurrent ? " (all idle processes at once, alongside the failover scenario)" : ""}; failover ${sizes.failoverTrials} trial(s), ${sizes.failoverProcesses} processes per contender, ${sizes.failoverTaskMs / 1000} s task; reconcile ${sizes.reconcileTasks} tasks; RSS at ${sizes.memoryTasks} tasks`,
    "",
  );
  row("scenario", "figure", "cronwarden", "raw Agenda");
  row("---", "---", "---:", "---:");
  for (const pollMs of LATENESS_POLLS) {
    const byContender = results.lateness?.[pollMs];
    if (byContender) latenessRows(row, byContender);
  }
  if (results.latenessMinute) minuteLatenessRows(row, results.latenessMinute);
  const floor = results.latenessFloor;
  if (floor)
    for (const [label, figures] of [
      ["from idle", floor.fromIdle],
      ["the engine's wait, with its wake-up shortly before", floor.engineWait],
    ] as const)
      row(
        `the machine's floor: bare node timers, ${figures.processes} processes waking together, ${figures.boundaries} instants (${label})`,
        "p50 / p99 / max (ms)",
        `${show(figures.p50, 1)} / ${show(figures.p99, 1)} / ${show(figures.max, 1)}`,
        "(the same machine)",
      );
  if (results.herd) herdRows(row, results.herd);
  if (results.herdShared) herdRows(row, results.herdShared);
  if (results.isolation) isolationRows(row, results.isolation);
  if (results.idle) idleRows(row, results.idle, sizes);
  if (results.failover) failoverRows(row, results.failover);
  if (results.partition) {
    const { cronwarden, agenda } = results.partition;
    row(
      `partition fallback (SIGSTOP, lock ${LOCK_LIFETIME_MS / 1000} s)`,
      "stop -> next start in another process (s)",
      show(cronwarden.failoverS, 1),
      show(agenda.failoverS, 1),
    );
  }
  if (results.rolling) rollingRows(row, results.rolling);
  if (results.rollingTuned) rollingRows(row, results.rollingTuned);
  if (results.backfill) backfillRows(row, results.backfill);
  if (results.pauseAll) pauseAllRows(row, results.pauseAll);
  if (results.sharding) shardingRows(row, results.sharding);
  if (results.reconcile) reconcileRows(row, results.reconcile);
  if (results.scale) scaleRows(row, results.scale);
  const memory = results.herdMemory;
  if (memory) {
    row(
      `herd-memory (${memory.tasks} tasks, one process)`,
      "runs / tasks not run exactly once / last start (ms)",
      `${memory.runs} / ${memory.wrongTasks} / ${show(memory.lastMs)}`,
      "n/a",
    );
    row(
      "",
      `VmRSS 10 s after the last start / after ${memory.rssMb?.idleWindowS ?? "?"} s idle (MB)`,
      `${show(memory.rssMb?.afterHerd, 1)} / ${show(memory.rssMb?.idle, 1)}`,
      "n/a",
    );
  }
  const small = results.reconcileSmall;
  if (small) {
    row(
      `reconcile (${small.count} tasks)`,
      "one entry edited: file write -> next_run_at stored (ms, median)",
      show(median(small.configToStoredMs)),
      "n/a",
    );
  }
  if (results.search) searchRows(row, results.search);
  lines.push("");
  return lines.join("\n");
}

function searchRows(row: Row, search: SearchFigures): void {
  const rows = search.rows.toLocaleString("en");
  row(
    `run search over ${rows} run records (table ${search.tableBytes}, index ${search.indexBytes})`,
    "load / index build (s)",
    `${show(search.loadS, 0)} / ${show(search.indexBuildS, 0)}`,
    "n/a",
  );
  for (const kind of search.kinds)
    row(
      `run search: ${kind.kind} (${kind.searches}x, ${show(kind.meanRows, 0)} rows each)`,
      "p50 / p95 / max (ms)",
      `${show(kind.p50, 1)} / ${show(kind.p95, 1)} / ${show(kind.max, 1)}`,
      "n/a",
    );
  row(
    `run search: all ${search.overall.searches} searches`,
    "p50 / p95 / max (ms)",
    `${show(search.overall.p50, 1)} / ${show(search.overall.p95, 1)} / ${show(search.overall.max, 1)}`,
    "n/a",
  );
}

function latenessRows(row: Row, lateness: Record<Contender, LatenessFigures>): void {
  const { cronwarden: cw, agenda } = lateness;
  row(
    `lateness (\`* * * * * *\`, poll ${cw.pollMs} ms, ${cw.slots} / ${agenda.slots} slots)`,
    "p50 (ms)",
    show(cw.p50, 1),
    show(agenda.p50, 1),
  );
  row("", "p99 (ms)", show(cw.p99, 1), show(agenda.p99, 1));
  row("", "max (ms)", show(cw.max, 1), show(agenda.max, 1));
  row("", "slots more than 100 ms late", `${cw.late}`, `${agenda.late}`);
  row(
    "",
    "missed / doubled slots",
    `${cw.missed} / ${cw.duplicates}`,
    `${agenda.missed} / ${agenda.duplicates}`,
  );
}

function minuteLatenessRows(row: Row, lateness: MinuteLatenessResult): void {
  const { cronwarden: cw, agenda } = lateness;
  row(
    `lateness at defaults (\`* * * * *\`, poll 5 s, ${cw.processes} / ${agenda.processes} processes)`,
    "minute boundaries measured",
    `${cw.boundaries}`,
    `${agenda.boundaries}`,
  );
  row("", "p50 (ms)", show(cw.p50, 1), show(agenda.p50, 1));
  row("", "p99 (ms)", show(cw.p99, 1), show(agenda.p99, 1));
  row("", "max (ms)", show(cw.max, 1), show(agenda.max, 1));
  row("", `boundaries started more than ${MINUTE_LATE_MS} ms late`, `${cw.late}`, `${agenda.late}`);
  row(
    "",
    "missed / doubled boundaries",
    `${cw.missed} / ${cw.duplicates}`,
    `${agenda.missed} / ${agenda.duplicates}`,
  );
  if (cw.otherStarts + agenda.otherStarts > 0)
    row("", "starts for another or an unknown slot", `${cw.otherStarts}`, `${agenda.otherStarts}`);
  const each = (figures: MinuteLatenessFigures) =>
    figures.perProcess
      .map(
        (process) =>
          `:${process.startSecond.toFixed(1).padStart(4, "0")}: ${process.lateness
            .map((ms) => (ms === null ? "missed" : `${ms}`))
            .join(", ")}`,
      )
      .join("; ");
  row("", "each process (started at second :ss): ms late per boundary", each(cw), each(agenda));
}

function herdRows(row: Row, herd: Record<Contender, HerdFigures>): void {
  const { cronwarden: cw, agenda } = herd;
  row(
    `herd (${cw.tasks} tasks due in one second${cw.instances > 1 ? `, ${cw.instances} processes on one database` : ""})`,
    "first start after the boundary (ms)",
    show(cw.firstMs),
    show(agenda.firstMs),
  );
  row("", "last start after the boundary (ms)", show(cw.lastMs), show(agenda.lastMs));
  row("", "runs of the slot (handlers' record)", `${cw.runs}`, `${agenda.runs}`);
  row("", "tasks not run exactly once", `${cw.wrongTasks}`, `${agenda.wrongTasks}`);
  row("", "success rows in agenda_logs", `${cw.logRuns ?? "–"}`, "– (no job log by default)");
  row("", "set-up: process start -> ready (ms)", show(cw.setupMs), show(agenda.setupMs));
  const cpu = (figures: HerdFigures) =>
    figures.cpuMsPerRun
      ? `${figures.cpuMsPerRun.node.toFixed(2)} + ${figures.cpuMsPerRun.postgres.toFixed(2)}`
      : "–";
  row(
    "",
    "CPU per run, 10 s before the boundary -> last start (ms): contender + PostgreSQL",
    cpu(cw),
    cpu(agenda),
  );
}

function isolationRows(row: Row, isolation: IsolationFigures): void {
  const { dispatch, herd } = isolation;
  const each = (mode: keyof IsolationFigures["dispatch"]) =>
    `${show(dispatch[mode].medianMs, 3)} / ${show(dispatch[mode].p99Ms, 3)}`;
  row(
    `isolation (a handler that returns at once, ${dispatch.worker.runs} runs back to back, warm pool)`,
    "handler call, median / p99 (ms): in-process function",
    each("function"),
    "–",
  );
  row("", "module export, isolation none", each("none"), "–");
  row("", "isolation worker", each("worker"), "–");
  row("", "isolation process", each("process"), "–");
  const overhead = (dispatch.worker.medianMs ?? Number.NaN) - (dispatch.function.medianMs ?? Number.NaN);
  row("", "worker over in-process, at the median (ms; goal <= 5)", show(overhead, 3), "–");
  row(
    `isolation herd (${herd.none.tasks} tasks due in one second)`,
    "last start after the boundary (ms): none / worker (end of the last run)",
    `${show(herd.none.lastMs)} / ${show(herd.worker.lastMs)}`,
    "–",
  );
  row("", "worker / none (goal <= 2)", show(herd.worker.lastMs / herd.none.lastMs, 2), "–");
  row(
    "",
    "tasks not run exactly once: none / worker",
    `${herd.none.wrongTasks} / ${herd.worker.wrongTasks}`,
    "–",
  );
}

function idleRows(row: Row, idle: IdleResult, sizes: Sizes): void {
  const keys = [100, 1000, 10000] as const;
  for (const key of keys) {
    const cw = idle.cronwarden[key];
    const agenda = idle.agenda[key];
    row(
      key === 100 ? "idle load (none due)" : "",
      `tps with ${cw?.tasks ?? key} tasks`,
      show(cw?.tps, 1),
      show(agenda?.tps, 1),
    );
  }
  const memoryOf = (contender: Contender) =>
    Object.values(idle[contender]).find((figures) => figures?.tasks === sizes.memoryTasks);
  row(
    "memory (VmRSS)",
    `RSS with ${sizes.memoryTasks} tasks (MB)`,
    show(memoryOf("cronwarden")?.rssMb, 1),
    show(memoryOf("agenda")?.rssMb, 1),
  );
  for (const key of keys) {
    const cw = idle.cronwarden[key];
    if (!cw || cw.tasks === sizes.memoryTasks) continue;
    row("", `RSS with ${cw.tasks} tasks (MB)`, show(cw.rssMb, 1), show(idle.agenda[key]?.rssMb, 1));
  }
  for (const key of keys) {
    const cw = idle.cronwarden[key];
    row(
      "",
      `set-up with ${cw?.tasks ?? key} tasks: process start -> ready (ms)`,
      show(cw?.setupMs),
      show(idle.agenda[key]?.setupMs),
    );
    if (cw?.firstStartError)
      row("", `${cw.tasks} tasks: first start **failed**; figures after a restart`, cw.firstStartError, "");
  }
}

function failoverRows(row: Row, failover: Record<Contender, FailoverTrial[]>): void {
  const cw = failoverFigures(failover.cronwarden);
  const agenda = failoverFigures(failover.agenda);
  row(
    `failover (SIGKILL, lock ${LOCK_LIFETIME_MS / 1000} s)`,
    "kill -> next start in another process (s, median)",
    show(cw.seconds, 1),
    show(agenda.seconds, 1),
  );
  const each = (contender: Contender) =>
    failover[contender].map((trial) => show(trial.failoverS, 1)).join(", ");
  row("", "each trial (s)", each("cronwarden"), each("agenda"));
  const which = (contender: Contender) =>
    failover[contender]
      .map((trial) =>
        trial.failoverS === null ? "none" : trial.sameSlot ? "re-run of the killed slot" : "next slot",
      )
      .join(", ");
  row("", "that start was", which("cronwarden"), which("agenda"));
  const lost = (contender: Contender) =>
    `${failover[contender].filter((trial) => trial.killedSlotLost).length} of ${failover[contender].length}`;
  row("", "trials where the killed slot was never re-run", lost("cronwarden"), lost("agenda"));
  row(
    "",
    "duplicate starts of a slot (all trials)",
    `${cw.duplicates ?? "–"}`,
    `${agenda.duplicates ?? "–"}`,
  );
  const after = (contender: Contender) =>
    failover[contender]
      .map((trial) =>
        trial.startsAfterKill
          .map(
            (start) =>
              `${start.afterKillS.toFixed(1)} s (slot ${start.slotOffsetS === null ? "?" : `+${start.slotOffsetS}`} s${start.rerun ? ", re-run" : ""})`,
          )
          .join(", "),
      )
      .join("; ");
  row("", "starts after the kill", after("cronwarden"), after("agenda"));
  const failures = (contender: Contender) =>
    failover[contender].map((trial) => trial.failures.join(", ") || "none").join("; ");
  row("", "errors after the kill (s after it: message)", failures("cronwarden"), failures("agenda"));
}

function rollingRows(row: Row, rolling: RollingFigures): void {
  const title = `rolling restart (3 processes, ${rolling.tasks} tasks every 10 s running 4 s, 2 s drain, ${rolling.maxConcurrency ?? "default"} runs at once)`;
  row(
    title,
    `slots lost / skipped by overlap / skipped by catch-up / run twice (of ${rolling.slots} expected)`,
    `${rolling.lost} / ${rolling.skippedOverlap} / ${rolling.skippedCatchUp} / ${rolling.doubled}`,
    "n/a",
  );
  if (rolling.skippedOther > 0)
    row("", "slots skipped for another reason", String(rolling.skippedOther), "n/a");
  row(
    "",
    "runs interrupted at a drain deadline / not re-run",
    `${rolling.interrupted} / ${rolling.notRerun}`,
    "n/a",
  );
  row(
    "",
    "interrupted -> its slot re-run (s, median / max)",
    `${show(rolling.rerunDelayMedianS, 2)} / ${show(rolling.rerunDelayMaxS, 2)}`,
    "n/a",
  );
}

function backfillRows(row: Row, backfill: BackfillFigures): void {
  const title = `backfill (${backfill.slots} past slots of a 1 s task running 100 ms, concurrency ${backfill.concurrency}, ${backfill.processes} processes, one SIGKILLed at half)`;
  row(
    title,
    "duration (s) / slots per s",
    `${show(backfill.durationS, 1)} / ${show(backfill.slotsPerS, 1)}`,
    "n/a",
  );
  row(
    "",
    "created -> first handler start / half done, the SIGKILL (s)",
    `${show(backfill.firstStartS, 2)} / ${show(backfill.halfS, 1)}`,
    "n/a",
  );
  row(
    "",
    "slots with exactly one success / none / more than one; started twice (taken over)",
    `${backfill.exactlyOnce} / ${backfill.missing} / ${backfill.duplicated}; ${backfill.restarted}`,
    "n/a",
  );
  row(
    "",
    "progress reads whose counts add up to the total",
    `${backfill.progressConsistent ? "all" : "NOT all"} of ${backfill.progressReads}`,
    "n/a",
  );
  const live = (figures: BackfillFigures["liveBefore"]) =>
    `${show(figures.p50Ms)} / ${show(figures.p99Ms)} / ${show(figures.maxMs)} ms, ${figures.notStarted} of ${figures.slots} not started`;
  row("", "live slots before: lateness p50 / p99 / max", live(backfill.liveBefore), "n/a");
  row("", "live slots during the backfill: lateness p50 / p99 / max", live(backfill.liveDuring), "n/a");
}

function pauseAllRows(row: Row, pause: PauseAllFigures): void {
  row(
    `pause all (${pause.tasks} tasks on a 5 s cron, ${pause.processes} processes, ${pause.rounds} rounds at different phases of the herd)`,
    "commit -> applied by every process (ms, median / max; one process at most)",
    `${show(pause.applyMedianMs)} / ${show(pause.applyMaxMs)}; ${show(pause.applyMaxPerProcessMs)}`,
    "n/a",
  );
  row(
    "",
    "handler starts after the process applied it / while it applied it / in the 10 s before",
    `${pause.startsAfterApplied} / ${pause.startsWhileApplying} / ${pause.startsBefore}`,
    "n/a",
  );
  row(
    "",
    "lift: commit -> applied by every process (ms, median / max)",
    `${show(pause.liftMedianMs)} / ${show(pause.liftMaxMs)}`,
    "n/a",
  );
}

function reconcileRows(row: Row, reconcile: ReconcileFigures): void {
  row(
    `reconcile (${reconcile.count} tasks)`,
    "validate the whole config, parseDesiredState (ms)",
    show(reconcile.validateMs),
    "n/a",
  );
  row(
    "",
    "scheduler.start() on an empty database (ms)",
    `${show(reconcile.startMs)}${failedNote(reconcile.startError)}`,
    "n/a",
  );
  if (reconcile.restartMs !== null)
    row("", "second start on the same database (ms)", show(reconcile.restartMs), "n/a");
  row(
    "",
    "cold: first reconcile, config loaded -> done (ms)",
    `${show(reconcile.coldMs)}${failedNote(reconcile.coldError)}`,
    "n/a",
  );
  row(
    "",
    "every cron changed: config loaded -> done (ms)",
    `${show(reconcile.changeMs)}${failedNote(reconcile.changeError)}`,
    "n/a",
  );
  row(
    "",
    "every cron changed: file write -> config loaded / -> done (ms)",
    `${show(reconcile.changeLoadMs)} / ${show(reconcile.changeFromWriteMs)}`,
    "n/a",
  );
  row("", "every cron changed: longest event-loop stall (ms)", show(reconcile.changeBlockedMs), "n/a");
  row("", "no change: config loaded -> done (ms)", show(reconcile.noopMs), "n/a");
  row(
    "",
    "changes applied: cold / change / no-op",
    `${reconcile.coldChanges} / ${reconcile.changeChanges} / ${reconcile.noopChanges}`,
    "n/a",
  );
  if (reconcile.changeError)
    row(
      "",
      "after the failed change: rows re-timed / changes the retry applied",
      `${reconcile.changeStored} / ${reconcile.changeRetryApplied}`,
      "n/a",
    );
  row("", "audit rows at the end", `${reconcile.auditRows}`, "n/a");
  row(
    "",
    "one entry edited: file write -> next_run_at stored (ms, median)",
    show(median(reconcile.configToStoredMs)),
    "n/a",
  );
}

/** The rolling scenario's figures in the JSON line. */
function rollingJson(rolling: RollingFigures | undefined) {
  if (!rolling) return null;
  return {
    max_concurrency: rolling.maxConcurrency,
    slots: rolling.slots,
    lost: rolling.lost,
    skipped_overlap: rolling.skippedOverlap,
    skipped_catch_up: rolling.skippedCatchUp,
    skipped_other: rolling.skippedOther,
    doubled: rolling.doubled,
    interrupted: rolling.interrupted,
    not_rerun: rolling.notRerun,
    rerun_delay_median_s: rolling.rerunDelayMedianS,
    rerun_delay_max_s: rolling.rerunDelayMaxS,
  };
}

/** The scale scenario's rows (bench/scenarios/scale.ts). */
function scaleRows(row: Row, scale: ScaleFigures): void {
  const name = `scale (${scale.tasks} tasks, ${scale.instances} instances)`;
  const list = (values: number[], digits = 0) => values.map((value) => show(value, digits)).join(" / ");
  row(name, "cold: first instance's first reconcile, loaded -> done (ms)", show(scale.coldMs), "n/a");
  row("", "scheduler.start() of each instance (ms)", list(scale.startMs), "n/a");
  row(
    "",
    `idle: transactions per second per instance (${scale.idleWindowS} s window)`,
    show(scale.idleTpsPerInstance, 2),
    "n/a",
  );
  row(
    "",
    "VmRSS of each instance: after the idle window; at the end (MB)",
    `${list(scale.rssMbIdle, 1)}; ${list(scale.rssMbEnd, 1)}`,
    "n/a",
  );
  row("", "no change, new revision: each instance's reconcile (ms)", list(scale.noopMs), "n/a");
  row(
    "",
    "one entry edited: file write -> row stored, each edit (median) (ms)",
    `${list(scale.editToStoredMs)} (${show(median(scale.editToStoredMs))})`,
    "n/a",
  );
  row(
    "",
    "one entry edited: the slowest instance's reconcile, each edit (ms)",
    list(scale.editReconcileMs),
    "n/a",
  );
}

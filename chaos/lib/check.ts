/**
 * The verdict of a chaos run, from the database's record alone: the run log (`agenda_logs`), the
 * audit trail of applied config changes (`cronwarden_audit`), the handlers' own journal
 * (`chaos_handler_runs`), and what the orchestrator knows it did (kills, PostgreSQL downtime,
 * documents written). Pure: `checkRecord` takes the rows and returns the figures and violations.
 */
import { CronExpressionParser } from "cron-parser";

export interface HandlerRun {
  task: string;
  slot: number;
  instance: string;
  pid: number;
  attempt: number;
  startedAt: number;
  finishedAt: number | null;
  error: string | null;
  /** The slot of the dead run this one repeats (epoch ms), NaN when "unknown", null for a first run. */
  rerunOf: number | null;
}

export interface LogRow {
  task: string;
  event: string;
  timestamp: number;
  slot: number | null;
  instance: string | null;
  outcome: string | null;
  rerun: boolean;
  duplicateOf: boolean;
  error: string | null;
}

export interface AuditRow {
  task: string;
  at: number;
  field: string;
  newValue: string | null;
  revision: string;
}

export interface ProcessRecord {
  label: string;
  pid: number;
  instance: string;
  spawnedAt: number;
  readyAt: number | null;
  endedAt: number | null;
  /** How it ended: killed by the chaos (SIGKILL), stopped gracefully at the end, or on its own. */
  end: "killed" | "stopped" | "crashed" | "hung" | null;
  code: number | null;
  signal: string | null;
  note?: string;
  /** Its stdout and stderr (a V8 fatal error lands there). */
  stderrFile?: string;
}

export interface CheckInput {
  handlerRuns: HandlerRun[];
  logRows: LogRow[];
  audit: AuditRow[];
  processes: ProcessRecord[];
  pgDown: Array<{ from: number; to: number }>;
  /** revision -> kind, for every hostile document written. */
  hostileRevisions: Map<string, string>;
  checkFrom: number;
  checkUntil: number;
  /** How long after a kill its runs are taken over at the latest (lock lifetime, the hold after an outage, polls). */
  takeoverWindowMs: number;
  /** Slots this close to a config change of their task may legitimately follow either schedule. */
  changeToleranceMs: number;
  unhandledRejections: number;
  /** Sharded tasks: their slot runs' handler is the coordinator (no journal line); chaos/lib/shardCheck.ts checks their failures. */
  shardedTasks?: string[];
}

export interface Figures {
  slotsDue: number;
  succeeded: number;
  runs: number;
  reruns: number;
  skipped: number;
  interrupted: number;
  caughtUp: number;
  caughtUpDeadWindow: number;
  superseded: number;
  lost: number;
  duplicates: number;
  phantomFailures: number;
  mislabelledStarts: number;
  killedNotRerun: number;
  unfinishedAtStop: number;
  hostileApplied: number;
  unhandledRejections: number;
  crashes: number;
  lateStartP99Ms: number | null;
}

export interface Verdict {
  figures: Figures;
  /** One entry per broken invariant, with up to 5 examples each. */
  violations: Array<{ invariant: string; count: number; examples: string[] }>;
  /** Examples of the accepted exceptions (caught-up, interrupted, superseded slots), for the reader. */
  notes: Array<{ what: string; count: number; examples: string[] }>;
}

const iso = (ms: number) => (Number.isNaN(ms) ? "unknown" : new Date(ms).toISOString());
const key = (task: string, slot: number) => `${task}@${iso(slot)}`;

function group<T>(items: T[], keyOf: (item: T) => string): Map<string, T[]> {
  const map = new Map<string, T[]>();
  for (const item of items) {
    const k = keyOf(item);
    const list = map.get(k);
    if (list) list.push(item);
    else map.set(k, [item]);
  }
  return map;
}

/** Each task's schedule over time, from the audit trail: [at, enabled, cron] after each applied change. */
function timelines(
  audit: AuditRow[],
): Map<string, Array<{ at: number; enabled: boolean; cron: string | null }>> {
  const result = new Map<string, Array<{ at: number; enabled: boolean; cron: string | null }>>();
  const sorted = [...audit].sort((a, b) => a.at - b.at);
  for (const row of sorted) {
    const line = result.get(row.task) ?? [];
    result.set(row.task, line);
    const last = line.at(-1);
    const state =
      last && last.at === row.at
        ? last
        : { at: row.at, enabled: last?.enabled ?? false, cron: last?.cron ?? null };
    if (row.field === "enabled") state.enabled = row.newValue === "true";
    if (row.field === "cron") state.cron = row.newValue;
    if (state !== last) line.push(state);
  }
  return result;
}

function occurrences(cron: string, from: number, until: number): number[] {
  if (until <= from) return [];
  const parsed = CronExpressionParser.parse(cron, { currentDate: new Date(from), tz: "UTC" });
  const times: number[] = [];
  for (;;) {
    const next = parsed.next().getTime();
    if (next >= until) return times;
    times.push(next);
  }
}

export function checkRecord(input: CheckInput): Verdict {
  const { handlerRuns, logRows, processes, checkFrom, checkUntil } = input;
  const violations: Verdict["violations"] = [];
  const violate = (invariant: string, examples: string[]) => {
    if (examples.length > 0)
      violations.push({ invariant, count: examples.length, examples: examples.slice(0, 5) });
  };
  const processByInstance = new Map(processes.map((process) => [process.instance, process]));
  const endOf = (run: HandlerRun) =>
    run.finishedAt ?? processByInstance.get(run.instance)?.endedAt ?? checkUntil;

  const outcomeRows = logRows.filter(
    (row) => (row.event === "success" || row.event === "fail") && !row.duplicateOf,
  );
  const successes = group(
    outcomeRows.filter((row) => row.event === "success" && row.outcome === "succeeded" && row.slot !== null),
    (row) => key(row.task, row.slot as number),
  );
  const skips = group(
    outcomeRows.filter((row) => row.outcome === "skipped" && row.slot !== null),
    (row) => key(row.task, row.slot as number),
  );
  const failRows = outcomeRows.filter(
    (row) => row.event === "fail" && !(input.shardedTasks ?? []).includes(row.task),
  );
  const starts = group(handlerRuns, (run) => key(run.task, run.slot));
  const startsBySlotInstance = group(handlerRuns, (run) => `${key(run.task, run.slot)}#${run.instance}`);

  // Agenda computes a job's next slot when a run starts: the slots between a run's slot and its
  // start (a late run: catch-up after downtime, a takeover, a re-enable) are skipped by design.
  const coverers = group(
    [
      ...handlerRuns.map((run) => ({ task: run.task, slot: run.slot, at: run.startedAt })),
      ...logRows
        .filter((row) => (row.event === "start" || row.outcome === "skipped") && row.slot !== null)
        .map((row) => ({ task: row.task, slot: row.slot as number, at: row.timestamp })),
    ],
    (item) => item.task,
  );
  const isCovered = (task: string, slot: number) =>
    (coverers.get(task) ?? []).some((item) => item.slot < slot && slot <= item.at + 50);
  const deadAt = (at: number) =>
    input.pgDown.some((window) => window.from <= at && at <= window.to) ||
    !processes.some(
      (process) =>
        process.readyAt !== null &&
        process.readyAt <= at &&
        (process.endedAt ?? Number.POSITIVE_INFINITY) >= at,
    );

  // 1. every slot due while its task was enabled
  let slotsDue = 0;
  let succeeded = 0;
  let skipped = 0;
  let interrupted = 0;
  let caughtUp = 0;
  let caughtUpDeadWindow = 0;
  let superseded = 0;
  const lost: string[] = [];
  const noted = {
    caughtUp: [] as string[],
    interrupted: [] as string[],
    interruptedDisabled: [] as string[],
    superseded: [] as string[],
  };
  for (const [task, line] of timelines(input.audit)) {
    const changes = line.map((point) => point.at);
    for (let index = 0; index < line.length; index++) {
      const point = line[index];
      if (!point?.enabled || !point.cron) continue;
      const nextChange = line[index + 1]?.at;
      const until = Math.min(nextChange ?? Number.POSITIVE_INFINITY, checkUntil);
      for (const slot of occurrences(point.cron, point.at, until)) {
        if (slot < checkFrom) continue;
        slotsDue++;
        const k = key(task, slot);
        if (successes.has(k)) succeeded++;
        else if (skips.has(k)) skipped++;
        else if (starts.has(k)) {
          interrupted++;
          const run = starts.get(k)?.[0] as HandlerRun;
          noted.interrupted.push(
            `${task} slot ${iso(slot)} on ${run.instance}: ${run.error ?? `no end (process ${processByInstance.get(run.instance)?.end})`}`,
          );
        } else if (isCovered(task, slot)) {
          caughtUp++;
          const dead = deadAt(slot);
          if (dead) caughtUpDeadWindow++;
          const by = (coverers.get(task) ?? []).find((item) => item.slot < slot && slot <= item.at + 50);
          noted.caughtUp.push(
            `${task} slot ${iso(slot)}${dead ? " (dead window)" : ""}: covered by the run of slot ${iso(by?.slot ?? Number.NaN)} started ${iso(by?.at ?? Number.NaN)}`,
          );
        } else if (
          changes.some((at) => Math.abs(at - slot) <= input.changeToleranceMs) ||
          (nextChange !== undefined &&
            !(coverers.get(task) ?? []).some((item) => item.at >= slot && item.at < nextChange))
        ) {
          // a re-timing or disable re-computes the next run from the change: a slot still pending
          // then (no run of the task started since it was due) is replaced by the new schedule
          superseded++;
          noted.superseded.push(
            `${task} slot ${iso(slot)}, still pending at the change at ${iso(nextChange ?? Number.NaN)}`,
          );
        } else
          lost.push(
            `${task} slot ${iso(slot)} (cron "${point.cron}" since ${iso(point.at)}): no run, no skip, not covered by a late run`,
          );
      }
    }
  }
  violate("lost slots (due while enabled, never run, not covered by the catch-up policy)", lost);

  // 2. duplicates
  // one entry per (task, slot), however many of the checks below see it
  const duplicateSlots = new Map<string, string>();
  const duplicate = (k: string, text: string) => {
    if (!duplicateSlots.has(k)) duplicateSlots.set(k, text);
  };
  for (const [task, runs] of group(handlerRuns, (run) => run.task)) {
    const sorted = [...runs].sort((a, b) => a.startedAt - b.startedAt);
    let open: HandlerRun | undefined;
    for (const run of sorted) {
      if (open && run.startedAt < endOf(open)) {
        duplicate(
          key(task, run.slot),
          `${task}: ${open.instance} ran slot ${iso(open.slot)} ${iso(open.startedAt)}..${iso(endOf(open))} while ${run.instance} started slot ${iso(run.slot)} at ${iso(run.startedAt)}`,
        );
      }
      if (!open || endOf(run) > endOf(open)) open = run;
    }
  }
  for (const [k, rows] of successes) {
    if (rows.length > 1)
      duplicate(k, `${k}: ${rows.length} success rows (${rows.map((row) => row.instance).join(", ")})`);
  }
  for (const [k, runs] of starts) {
    const ok = runs
      .filter((run) => run.finishedAt !== null && run.error === null)
      .sort((a, b) => a.startedAt - b.startedAt);
    for (const later of ok.slice(1)) {
      const earlier = ok[0] as HandlerRun;
      const earlierProcess = processByInstance.get(earlier.instance);
      // at-least-once: a handler that returned on an instance killed before the run's end was saved is re-run
      const earlierUnsaved =
        earlierProcess?.end === "killed" &&
        !(successes.get(k) ?? []).some((row) => row.instance === earlier.instance);
      if (later.rerunOf === later.slot && earlierUnsaved) continue;
      duplicate(
        k,
        `${k}: handler succeeded on ${earlier.instance} at ${iso(earlier.startedAt)} and again on ${later.instance} at ${iso(later.startedAt)}${later.rerunOf === null ? " (not a re-run)" : ""}`,
      );
    }
  }
  const duplicates = [...duplicateSlots.values()];
  violate("duplicates (overlapping executions of a task, or a slot run to success twice)", duplicates);

  // 3. failures without a handler start
  const phantoms = failRows
    .filter(
      (row) =>
        row.slot === null ||
        // a handler of that slot on that instance had started by then (a later run of the slot does not count)
        !(startsBySlotInstance.get(`${key(row.task, row.slot)}#${row.instance}`) ?? []).some(
          (run) => run.startedAt <= row.timestamp,
        ),
    )
    .map(
      (row) =>
        `${row.task} slot ${row.slot === null ? "none" : iso(row.slot)} on ${row.instance} at ${iso(row.timestamp)}: ${row.error}`,
    );
  violate("phantom failures (a fail row whose handler never started)", phantoms);

  // 4. start rows that name another slot (or lack the re-run mark) than the handler they started
  const mislabelled: string[] = [];
  const handlerByTaskInstance = group(handlerRuns, (run) => `${run.task}#${run.instance}`);
  for (const row of logRows) {
    if (row.event !== "start" || row.slot === null) continue;
    const near = (handlerByTaskInstance.get(`${row.task}#${row.instance}`) ?? []).filter(
      (run) => run.startedAt >= row.timestamp - 1000 && run.startedAt <= row.timestamp + 3000,
    );
    if (near.length === 0) continue; // skipped, or killed before the handler
    const match = near.find((run) => run.slot === row.slot);
    if (!match) {
      mislabelled.push(
        `${row.task} start row on ${row.instance} at ${iso(row.timestamp)} says slot ${iso(row.slot)}${row.rerun ? " (re-run)" : ""}; its handler ran slot ${iso((near[0] as HandlerRun).slot)}${(near[0] as HandlerRun).rerunOf !== null ? " as a re-run" : ""}`,
      );
    } else if ((match.rerunOf !== null) !== row.rerun) {
      mislabelled.push(
        `${row.task} start row on ${row.instance} at ${iso(row.timestamp)} for slot ${iso(row.slot)}: re-run mark ${row.rerun}, handler rerunOf ${match.rerunOf === null ? "none" : iso(match.rerunOf)}`,
      );
    }
  }
  violate("mislabelled start rows (slot or re-run mark differs from the handler's)", mislabelled);

  // 5. runs cut by a SIGKILL are re-run for their slot; graceful stops leave none unfinished
  const killedNotRerun: string[] = [];
  const unfinishedAtStop: string[] = [];
  const lines = timelines(input.audit);
  // a takeover needs the task enabled until its dead lock expired and a poll found it
  const enabledThrough = (task: string, from: number, until: number) => {
    const line = lines.get(task) ?? [];
    let enabled = false;
    for (const point of line) if (point.at <= from) enabled = point.enabled;
    return enabled && !line.some((point) => point.at > from && point.at <= until && !point.enabled);
  };
  for (const run of handlerRuns) {
    if (run.finishedAt !== null) continue;
    const process = processByInstance.get(run.instance);
    if (process?.end === "stopped") {
      unfinishedAtStop.push(
        `${run.task} slot ${iso(run.slot)} on ${run.instance}: handler still running at the graceful stop`,
      );
      continue;
    }
    const rerun = handlerRuns.some(
      (other) => other.task === run.task && other.startedAt > run.startedAt && other.rerunOf === run.slot,
    );
    const killedAt = process?.endedAt ?? run.startedAt;
    if (!rerun && !enabledThrough(run.task, run.startedAt, killedAt + input.takeoverWindowMs)) {
      noted.interruptedDisabled.push(
        `${run.task} slot ${iso(run.slot)} on ${run.instance}: task disabled before the takeover`,
      );
    } else if (!rerun) {
      const misnamed = handlerRuns
        .filter(
          (other) => other.task === run.task && other.startedAt > run.startedAt && other.rerunOf !== null,
        )
        .sort((a, b) => a.startedAt - b.startedAt)[0];
      killedNotRerun.push(
        `${run.task} slot ${iso(run.slot)} started on ${run.instance} at ${iso(run.startedAt)}, process ${process?.end ?? "?"} at ${iso(process?.endedAt ?? Number.NaN)}; no re-run of that slot${misnamed ? ` (the next re-run, on ${misnamed.instance} at ${iso(misnamed.startedAt)}, ran slot ${iso(misnamed.slot)} as rerunOf ${iso(misnamed.rerunOf ?? Number.NaN)})` : ""}`,
      );
    }
  }
  violate("killed runs not re-run as rerunOf their slot", killedNotRerun);
  violate("handlers still running at the graceful stop", unfinishedAtStop);

  // 6. crashes: any instance that ended other than by our SIGKILL or a clean graceful stop
  const crashes = processes
    .filter(
      (process) =>
        process.end === "crashed" ||
        process.end === "hung" ||
        (process.end === "stopped" && process.code !== 0),
    )
    .map(
      (process) =>
        `${process.instance}: ${process.end} (code ${process.code}, signal ${process.signal})${process.note ? `: ${process.note}` : ""}`,
    );
  violate("process crashes (instances that exited on their own, or not cleanly on SIGTERM)", crashes);

  // 7. hostile documents change nothing
  const appliedHostile = group(
    input.audit.filter((row) => input.hostileRevisions.has(row.revision)),
    (row) => row.revision,
  );
  violate(
    "hostile documents applied (audit rows from a document that should have been refused)",
    [...appliedHostile].map(
      ([revision, rows]) =>
        `${input.hostileRevisions.get(revision)} document ${revision}: ${rows.length} changes (e.g. ${rows[0]?.task} ${rows[0]?.field} -> ${rows[0]?.newValue})`,
    ),
  );
  violate(
    "unhandled promise rejections logged",
    input.unhandledRejections > 0 ? [`${input.unhandledRejections} log lines`] : [],
  );

  const inWindow = handlerRuns.filter((run) => run.slot >= checkFrom && run.slot <= checkUntil);
  const lateness = inWindow
    .filter((run) => run.rerunOf === null && run.attempt === 1)
    .map((run) => run.startedAt - run.slot)
    .sort((a, b) => a - b);
  return {
    figures: {
      slotsDue,
      succeeded,
      runs: inWindow.length,
      reruns: inWindow.filter((run) => run.rerunOf !== null).length,
      skipped,
      interrupted,
      caughtUp,
      caughtUpDeadWindow,
      superseded,
      lost: lost.length,
      duplicates: duplicates.length,
      phantomFailures: phantoms.length,
      mislabelledStarts: mislabelled.length,
      killedNotRerun: killedNotRerun.length,
      unfinishedAtStop: unfinishedAtStop.length,
      hostileApplied: appliedHostile.size,
      unhandledRejections: input.unhandledRejections,
      crashes: crashes.length,
      lateStartP99Ms: lateness.length ? (lateness[Math.floor(0.99 * (lateness.length - 1))] ?? null) : null,
    },
    violations,
    notes: Object.entries(noted)
      .filter(([, examples]) => examples.length > 0)
      .map(([what, examples]) => ({ what, count: examples.length, examples: examples.slice(0, 5) })),
  };
}

import { type Clock, clockDate } from "../core/clock.js";
import type { AgendaEngine } from "../engine/agendaEngine.js";
import type { PauseState } from "../engine/pauseGate.js";
import type { RunSearchQuery, RunSearchRow } from "../engine/sql.js";
import { type InstanceDeathMark, instanceDeathMark } from "../status/timelineMarks.js";
import type { AuditLog } from "../store/auditLog.js";

/**
 * The operations an operator uses on a bad day, beside run-now and resume (docs/operations.md):
 * the pause-all switch, the instances, the run search. The scheduler binds them to its engine and
 * audit trail; the decisions are the engine's (src/engine/pauseGate.ts, src/engine/sql/).
 */

export type { PauseState } from "../engine/pauseGate.js";

export interface PauseAllRequest {
  /** Who asked (a token's name). */
  requestedBy: string;
  /** Where from (admin API, dashboard, CLI), for the audit trail's source. */
  via: string;
  /** Why, in words: kept with the switch and in the audit trail. */
  reason: string;
}

export interface PauseAllResult {
  /** Whether this call changed the switch (false: it was already as asked). */
  changed: boolean;
  /** The switch after the call; null while off. */
  pause: PauseState | null;
  /** For a lift: the pause it ended. */
  lifted: PauseState | null;
}

/** The audit-trail task of the switch's entries: it concerns every task of the namespace. */
export const ALL_TASKS = "*";

export interface OperationsContext {
  engine: AgendaEngine;
  audit: AuditLog;
  instanceId: string;
  revision: () => string;
}

/** Turns the namespace's pause-all switch on (`on`) or off; audited with who and why, in the same transaction. */
export async function setPauseAll(
  context: OperationsContext,
  on: boolean,
  request: PauseAllRequest,
): Promise<PauseAllResult> {
  const { before, after } = await context.engine.setPauseAll(
    on,
    request.requestedBy,
    request.reason,
    (db, previous) =>
      context.audit.record(
        [
          {
            task: ALL_TASKS,
            kind: on ? "pause-all" : "resume-all",
            field: "pauseAll",
            oldValue: previous ? `on: ${previous.reason} (by ${previous.pausedBy})` : "off",
            newValue: on ? `on: ${request.reason}` : `off: ${request.reason}`,
            source: request.via,
            revision: context.revision(),
            instance: context.instanceId,
            actor: request.requestedBy,
          },
        ],
        db,
      ),
  );
  const changed = on ? before === undefined : before !== undefined;
  return { changed, pause: after ?? null, lifted: on ? null : (before ?? null) };
}

export interface InstanceView {
  id: string;
  host: string | null;
  version: string | null;
  /** When the process started its engine. */
  startedAt: Date | null;
  /** Its liveness check's last statement (every livenessCheckMs). */
  lastSeenAt: Date | null;
  runsInProgress: number;
  concurrency: number | null;
  /** live: its liveness lock is held; dead: gone, its runs handed over (or about to be). */
  state: "live" | "dead";
  /** A dead instance: when its death was confirmed, by which instance, and the tasks whose runs were handed over. */
  diedAt?: Date;
  seenBy?: string;
  handedOver?: string[];
}

/** How long a recorded death shows in GET /instances. */
export const DEATHS_SHOWN_MS = 24 * 3_600_000;

/** The registered instances, and those found dead in the last DEATHS_SHOWN_MS, newest death first. */
export async function listInstances(engine: AgendaEngine, now: Date): Promise<InstanceView[]> {
  const { instances, deaths } = await engine.instances(new Date(now.getTime() - DEATHS_SHOWN_MS));
  return [
    ...instances.map(
      (row): InstanceView => ({
        id: row.instance_id,
        host: row.host,
        version: row.version,
        startedAt: row.process_started_at ?? row.started_at,
        lastSeenAt: row.last_seen_at,
        runsInProgress: row.runs_in_progress,
        concurrency: row.concurrency,
        state: row.state,
      }),
    ),
    ...deaths.map(
      (row): InstanceView => ({
        id: row.instance_id,
        host: row.host,
        version: row.version,
        startedAt: row.process_started_at,
        lastSeenAt: row.last_seen_at,
        runsInProgress: 0,
        concurrency: row.concurrency,
        state: "dead",
        diedAt: row.died_at,
        seenBy: row.seen_by,
        handedOver: row.handed_over,
      }),
    ),
  ];
}

/** Deaths in a timeline's range are read up to this many (a fleet restarted in a crash loop). */
const DEATH_MARKS = 500;

/** The timeline's marks of instances that died in [from, to), oldest first. */
export async function instanceDeathMarks(
  engine: AgendaEngine,
  range: { from: Date; to: Date },
): Promise<InstanceDeathMark[]> {
  const rows = await engine.instanceDeaths({ ...range, limit: DEATH_MARKS });
  return rows.map(instanceDeathMark).reverse();
}

export interface FoundRun {
  id: string;
  task: string;
  scheduledAt: string | null;
  outcome: string;
  /** When the record was written (the attempt's end). */
  recordedAt: Date;
  startedAt: string | null;
  durationMs: number | null;
  attempt: number | null;
  trigger: string;
  requestedBy: string | null;
  instanceId: string | null;
  error: string | null;
  detail: string | null;
  /** false: an attempt its retry policy followed with another. */
  final: boolean;
}

export interface RunSearchPage {
  runs: FoundRun[];
  /** The next page: pass as `before`. */
  next: { timestamp: Date; id: string } | null;
}

/** One page of the run search, newest recorded first (src/engine/sql/runSearch.ts). */
export async function searchRuns(engine: AgendaEngine, query: RunSearchQuery): Promise<RunSearchPage> {
  const rows = await engine.searchRuns({ ...query, limit: query.limit + 1 });
  const page = rows.slice(0, query.limit);
  const last = page.at(-1);
  return {
    runs: page.map(foundRun),
    next: rows.length > query.limit && last ? { timestamp: last.timestamp, id: last.id } : null,
  };
}

function foundRun(row: RunSearchRow): FoundRun {
  const attempt = row.attempt !== null && /^\d+$/.test(row.attempt) ? Number(row.attempt) : null;
  return {
    id: row.id,
    task: row.job_name,
    scheduledAt: row.slot,
    outcome: row.outcome,
    recordedAt: row.timestamp,
    startedAt: row.started_at,
    durationMs: row.duration,
    attempt,
    trigger: row.trigger ?? "schedule",
    requestedBy: row.requested_by,
    instanceId: row.instance_id ?? row.agenda_name,
    error: row.error,
    detail: row.detail,
    final: row.event !== "retry",
  };
}

/**
 * The fleet's switches and views, bound to the scheduler's engine and audit trail (Scheduler.fleet):
 * pause all and resume all, the instances, the instance deaths of the timeline, the run search.
 */
export class FleetOperations {
  readonly #context: OperationsContext & { clock: Clock };

  constructor(context: OperationsContext & { clock: Clock }) {
    this.#context = context;
  }

  /**
   * Pauses every task of the namespace, on every instance (docs/operations.md, "Pause all"): no run
   * starts until resumeAll(); the job rows are not changed. Audited (`pause-all`, who and why).
   */
  pauseAll(request: PauseAllRequest): Promise<PauseAllResult> {
    return setPauseAll(this.#context, true, request);
  }

  /** Lifts pause-all: the slots missed meanwhile follow each task's catchUp. Audited (`resume-all`). */
  resumeAll(request: PauseAllRequest): Promise<PauseAllResult> {
    return setPauseAll(this.#context, false, request);
  }

  /** The namespace's pause-all switch as this instance knows it; undefined while off. */
  pauseState(): PauseState | undefined {
    return this.#context.engine.pauseState;
  }

  /** The instances: registered ones (live or dead) and those found dead in the last day (docs/operations.md, "Instances"). */
  instances(): Promise<InstanceView[]> {
    return listInstances(this.#context.engine, clockDate(this.#context.clock));
  }

  /** The timeline's marks of instances that died in [from, to) and whose runs were handed over. */
  instanceDeaths(range: { from: Date; to: Date }): ReturnType<typeof instanceDeathMarks> {
    return instanceDeathMarks(this.#context.engine, range);
  }

  /** Run records by task, outcome, time range and words in their error or log lines, newest first. */
  searchRuns(query: Parameters<typeof searchRuns>[1]): Promise<RunSearchPage> {
    return searchRuns(this.#context.engine, query);
  }
}

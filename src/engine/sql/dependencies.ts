import { encodeRunMeta, metaText, RUN_META } from "../runLogMeta.js";
import { DEPENDENCY_WAITS_TABLE, JOBS_TABLE, LOGS_TABLE, type Queryable } from "./tables.js";

/**
 * Task dependencies (docs/dependencies.md): the waits table, the claim that decides each
 * (downstream, slot) once across instances, and the job-row changes that queue a downstream's run.
 */

export const CREATE_DEPENDENCY_WAITS = `
  CREATE TABLE IF NOT EXISTS "${DEPENDENCY_WAITS_TABLE}" (
    task          TEXT NOT NULL,
    slot          TIMESTAMPTZ NOT NULL,
    upstreams     TEXT[] NOT NULL,
    condition     TEXT NOT NULL,
    wait_at_most  TEXT,
    deadline_at   TIMESTAMPTZ,
    manual        BOOLEAN NOT NULL DEFAULT FALSE,
    state         TEXT NOT NULL DEFAULT 'waiting'
                  CHECK (state IN ('waiting', 'queued', 'running', 'ran', 'skipped')),
    reason        TEXT,
    skip_kind     TEXT,
    upstream_runs JSONB,
    outcome       TEXT,
    opened_at     TIMESTAMPTZ NOT NULL DEFAULT now(),
    opened_by     TEXT,
    decided_at    TIMESTAMPTZ,
    decided_by    TEXT,
    PRIMARY KEY (task, slot)
  );
  CREATE INDEX IF NOT EXISTS "${DEPENDENCY_WAITS_TABLE}_open"
    ON "${DEPENDENCY_WAITS_TABLE}" (task, slot) WHERE state IN ('waiting', 'queued');
  CREATE INDEX IF NOT EXISTS "${DEPENDENCY_WAITS_TABLE}_slot" ON "${DEPENDENCY_WAITS_TABLE}" (slot DESC)`;

export interface WaitRow {
  task: string;
  slot: Date;
  upstreams: string[];
  condition: string;
  wait_at_most: string | null;
  deadline_at: Date | null;
  manual: boolean;
  state: "waiting" | "queued" | "running" | "ran" | "skipped";
  reason: string | null;
  skip_kind: string | null;
  upstream_runs: UpstreamRunRow[] | null;
  outcome: string | null;
  opened_at: Date;
  decided_at: Date | null;
}

export interface UpstreamRunRow {
  name: string;
  runKey: string;
  outcome: string;
  traceparent?: string;
}

/** Opens a wait; true when this call created it (the others found it open already). */
export async function openWait(
  db: Queryable,
  wait: {
    task: string;
    slot: Date;
    upstreams: string[];
    condition: string;
    waitAtMost: string | null;
    waitAtMostMs: number | null;
    manual: boolean;
    instance: string;
  },
): Promise<boolean> {
  const result = await db.query(
    `INSERT INTO "${DEPENDENCY_WAITS_TABLE}"
       (task, slot, upstreams, condition, wait_at_most, deadline_at, manual, opened_by)
     VALUES ($1, $2, $3, $4, $5, $2::timestamptz + make_interval(secs => $6::double precision / 1000), $7, $8)
     ON CONFLICT (task, slot) DO NOTHING`,
    [
      wait.task,
      wait.slot,
      wait.upstreams,
      wait.condition,
      wait.waitAtMost,
      wait.waitAtMostMs,
      wait.manual,
      wait.instance,
    ],
  );
  return (result.rowCount ?? 0) > 0;
}

export async function selectWait(db: Queryable, task: string, slot: Date): Promise<WaitRow | undefined> {
  const result = await db.query<WaitRow>(
    `SELECT * FROM "${DEPENDENCY_WAITS_TABLE}" WHERE task = $1 AND slot = $2`,
    [task, slot],
  );
  return result.rows[0];
}

/** Open waits (oldest first), for the periodic re-evaluation. */
export async function selectOpenWaits(db: Queryable, limit: number): Promise<WaitRow[]> {
  const result = await db.query<WaitRow>(
    `SELECT * FROM "${DEPENDENCY_WAITS_TABLE}" WHERE state = 'waiting' ORDER BY slot LIMIT $1`,
    [limit],
  );
  return result.rows;
}

export interface UpstreamSlotRow {
  name: string;
  outcome: string | null;
  /** The traceparent of the run whose record gave the outcome, when it was traced. */
  traceparent: string | null;
  disabled: boolean | null;
}

/** Each upstream's final outcome for the slot (a run's last outcome row; interrupted runs are not final) and whether its job is disabled. */
export async function selectUpstreamOutcomes(
  db: Queryable,
  upstreams: string[],
  slot: Date,
): Promise<UpstreamSlotRow[]> {
  const result = await db.query<UpstreamSlotRow>(
    `SELECT u.name, o.outcome, o.traceparent, j.disabled
       FROM unnest($1::text[]) AS u(name)
       LEFT JOIN LATERAL (
         SELECT ${metaText("outcome", "l")} AS outcome, ${metaText("traceparent", "l")} AS traceparent
           FROM "${LOGS_TABLE}" l
          WHERE l.job_name = u.name AND ${metaText("scheduledAt", "l")} = $2 AND l.event IN ('success', 'fail')
            AND ${metaText("outcome", "l")} IN ('succeeded', 'failed', 'skipped')
          ORDER BY l.timestamp DESC LIMIT 1) o ON TRUE
       LEFT JOIN "${JOBS_TABLE}" j ON j.name = u.name AND j.type = 'single'`,
    [upstreams, slot.toISOString()],
  );
  return result.rows;
}

/**
 * The claim: decides an open wait, once across instances (`state = 'waiting'` is the fence). A run
 * is queued; a skip writes the downstream's `skipped` run record in the same statement, so a skip is
 * recorded exactly when it is claimed. Returns whether this call won.
 */
export async function decideWait(
  db: Queryable,
  decision: {
    task: string;
    slot: Date;
    instance: string;
    upstreamRuns: UpstreamRunRow[];
    /** Only from this state (default `waiting`); the removal of a dependency closes queued ones too. */
    fromStates?: string[];
  } & ({ state: "queued" } | { state: "skipped"; reason: string; skipKind: string }),
): Promise<boolean> {
  const skipped = decision.state === "skipped";
  const result = await db.query(
    `WITH claimed AS (
       UPDATE "${DEPENDENCY_WAITS_TABLE}"
          SET state = $3, reason = $4, skip_kind = $5, upstream_runs = $6::jsonb,
              decided_at = now(), decided_by = $7
        WHERE task = $1 AND slot = $2 AND state = ANY($9::text[])
        RETURNING task, slot, manual
     ), recorded AS (
       INSERT INTO "${LOGS_TABLE}" (timestamp, level, event, job_id, job_name, message, agenda_name, meta)
       SELECT now(), 'info', 'success', j.id::text, c.task, 'skipped: ' || $4, $7,
              $8::jsonb || jsonb_build_object('${RUN_META.finishedAt}', to_jsonb(now()))
         FROM claimed c LEFT JOIN "${JOBS_TABLE}" j ON j.name = c.task AND j.type = 'single'
        WHERE $3 = 'skipped'
       RETURNING 1
     )
     SELECT (SELECT count(*) FROM claimed) AS claimed`,
    [
      decision.task,
      decision.slot,
      decision.state,
      skipped ? decision.reason : null,
      skipped ? decision.skipKind : null,
      JSON.stringify(decision.upstreamRuns),
      decision.instance,
      skipped
        ? JSON.stringify(
            encodeRunMeta({
              scheduledAt: decision.slot,
              instanceId: decision.instance,
              trigger: "schedule",
              outcome: "skipped",
              detail: decision.reason,
              dependency: {
                reason: decision.reason,
                kind: decision.skipKind,
                upstreams: decision.upstreamRuns,
              },
            }),
          )
        : null,
      decision.fromStates ?? ["waiting"],
    ],
  );
  return Number(result.rows[0]?.claimed ?? 0) > 0;
}

/** Open waits past their `waitAtMost`: the sweeper decides each (the claim still fences it). */
export async function selectExpiredWaits(db: Queryable): Promise<WaitRow[]> {
  const result = await db.query<WaitRow>(
    `SELECT * FROM "${DEPENDENCY_WAITS_TABLE}" WHERE state = 'waiting' AND deadline_at <= now() ORDER BY slot LIMIT 100`,
  );
  return result.rows;
}

/**
 * Makes downstream rows due for their earliest queued slot: `next_run_at` is set to the slot itself
 * (in the past), so the lock captures it as the run's slot. Only unlocked, enabled rows without an
 * earlier due time; a running downstream is queued again when its end is saved (next_run_at NULL).
 */
export async function pumpQueuedWaits(
  db: Queryable,
): Promise<{ id: string; name: string; next_run_at: Date }[]> {
  const result = await db.query<{ id: string; name: string; next_run_at: Date }>(
    `UPDATE "${JOBS_TABLE}" j SET next_run_at = q.slot
       FROM (SELECT task, min(slot) AS slot FROM "${DEPENDENCY_WAITS_TABLE}"
              WHERE state = 'queued' GROUP BY task) q
      WHERE j.name = q.task AND j.type = 'single' AND j.locked_at IS NULL AND j.disabled = FALSE
        AND j.repeat_interval IS NULL AND (j.next_run_at IS NULL OR j.next_run_at > q.slot)
      RETURNING j.id, j.name, j.next_run_at`,
  );
  return result.rows;
}

/** A downstream run starts for its slot: the wait is marked running and its upstream runs returned. */
export async function startQueuedWait(db: Queryable, task: string, slot: Date): Promise<WaitRow | undefined> {
  const result = await db.query<WaitRow>(
    `UPDATE "${DEPENDENCY_WAITS_TABLE}" SET state = 'running'
      WHERE task = $1 AND slot = $2 AND state IN ('queued', 'running')
      RETURNING *`,
    [task, slot],
  );
  return result.rows[0];
}

/** A downstream run ended with its final outcome. */
export async function finishWait(db: Queryable, task: string, slot: Date, outcome: string): Promise<void> {
  await db.query(
    `UPDATE "${DEPENDENCY_WAITS_TABLE}" SET state = 'ran', outcome = $3
      WHERE task = $1 AND slot = $2 AND state IN ('queued', 'running')`,
    [task, slot, outcome],
  );
}

export interface DownstreamRow {
  name: string;
  after: unknown;
  disabled: boolean;
}

/** Every downstream row (the ones keeping a dependency in data.after). */
export async function selectDownstreamRows(db: Queryable): Promise<DownstreamRow[]> {
  const result = await db.query<DownstreamRow>(
    `SELECT name, data->'after' AS after, disabled FROM "${JOBS_TABLE}"
      WHERE type = 'single' AND data ? 'after' ORDER BY name`,
  );
  return result.rows;
}

/**
 * Makes a row a downstream (no schedule of its own, the spec in data.after) or a plain row again.
 * Becoming a downstream clears the next run (its runs are queued by its upstreams).
 */
export async function setDependencyRow(db: Queryable, name: string, after: unknown | null): Promise<void> {
  if (after === null) {
    await db.query(
      `UPDATE "${JOBS_TABLE}" SET data = coalesce(data, '{}'::jsonb) - 'after' WHERE name = $1 AND type = 'single'`,
      [name],
    );
    return;
  }
  await db.query(
    `UPDATE "${JOBS_TABLE}"
        SET data = coalesce(data, '{}'::jsonb) || jsonb_build_object('after', $2::jsonb),
            next_run_at = CASE WHEN repeat_interval IS NULL THEN next_run_at ELSE NULL END,
            repeat_interval = NULL, repeat_timezone = NULL
      WHERE name = $1 AND type = 'single'`,
    [name, JSON.stringify(after)],
  );
}

/** Open and queued waits whose task or whose listed upstreams the given dependency no longer has. */
export async function selectWaitsOf(db: Queryable, task: string, states: string[]): Promise<WaitRow[]> {
  const result = await db.query<WaitRow>(
    `SELECT * FROM "${DEPENDENCY_WAITS_TABLE}" WHERE task = $1 AND state = ANY($2::text[]) ORDER BY slot`,
    [task, states],
  );
  return result.rows;
}

/** The waits of recent slots, newest first (the chain view). */
export async function selectRecentWaits(
  db: Queryable,
  query: { tasks?: string[]; limit: number },
): Promise<WaitRow[]> {
  const result = await db.query<WaitRow>(
    `SELECT * FROM "${DEPENDENCY_WAITS_TABLE}"
      WHERE ($1::text[] IS NULL OR task = ANY($1::text[]))
      ORDER BY slot DESC, task LIMIT $2`,
    [query.tasks ?? null, query.limit],
  );
  return result.rows;
}

import { metaText } from "../runLogMeta.js";
import {
  INSTANCES_TABLE,
  JOBS_TABLE,
  LIVENESS_LOCK_NAMESPACE,
  LOGS_TABLE,
  type Queryable,
} from "./tables.js";

/**
 * Backfills (docs/operations.md, "Backfill"): one row per backfill, one row per slot of its range.
 * A slot row is claimed like a job row (a lock time and its holder, renewed while it runs, taken
 * over when it expires or its holder is dead), never through the task's own job row, so a
 * backfill never holds the lock its task's live slots need.
 */
export const BACKFILLS_TABLE = "cronwarden_backfills";
export const BACKFILL_SLOTS_TABLE = "cronwarden_backfill_slots";

export const CREATE_BACKFILLS = `
  CREATE TABLE IF NOT EXISTS "${BACKFILLS_TABLE}" (
    id              UUID PRIMARY KEY,
    task            TEXT NOT NULL,
    from_at         TIMESTAMPTZ NOT NULL,
    to_at           TIMESTAMPTZ NOT NULL,
    mode            TEXT NOT NULL CHECK (mode IN ('missing', 'all')),
    concurrency     INT NOT NULL CHECK (concurrency >= 1),
    with_downstream BOOLEAN NOT NULL DEFAULT FALSE,
    state           TEXT NOT NULL CHECK (state IN ('running', 'cancelled', 'done')),
    requested_by    TEXT NOT NULL,
    reason          TEXT,
    created_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    ended_at        TIMESTAMPTZ,
    cancelled_by    TEXT
  );
  CREATE INDEX IF NOT EXISTS "${BACKFILLS_TABLE}_running_idx" ON "${BACKFILLS_TABLE}" (created_at) WHERE state = 'running';
  CREATE INDEX IF NOT EXISTS "${BACKFILLS_TABLE}_task_idx" ON "${BACKFILLS_TABLE}" (task, created_at DESC);
  CREATE TABLE IF NOT EXISTS "${BACKFILL_SLOTS_TABLE}" (
    backfill_id UUID NOT NULL REFERENCES "${BACKFILLS_TABLE}" (id) ON DELETE CASCADE,
    slot        TIMESTAMPTZ NOT NULL,
    state       TEXT NOT NULL CHECK (state IN ('pending', 'running', 'succeeded', 'failed', 'skipped', 'cancelled')),
    locked_at   TIMESTAMPTZ,
    locked_by   TEXT,
    runs        INT NOT NULL DEFAULT 0,
    started_at  TIMESTAMPTZ,
    ended_at    TIMESTAMPTZ,
    detail      TEXT,
    PRIMARY KEY (backfill_id, slot)
  );
  CREATE INDEX IF NOT EXISTS "${BACKFILL_SLOTS_TABLE}_open_idx" ON "${BACKFILL_SLOTS_TABLE}" (backfill_id, slot)
    WHERE state IN ('pending', 'running')`;

export type BackfillMode = "missing" | "all";
export type BackfillState = "running" | "cancelled" | "done";
export type BackfillSlotState = "pending" | "running" | "succeeded" | "failed" | "skipped" | "cancelled";

export interface BackfillRow {
  id: string;
  task: string;
  from_at: Date;
  to_at: Date;
  mode: BackfillMode;
  concurrency: number;
  with_downstream: boolean;
  state: BackfillState;
  requested_by: string;
  reason: string | null;
  created_at: Date;
  ended_at: Date | null;
  cancelled_by: string | null;
}

const BACKFILL_COLUMNS = `id, task, from_at, to_at, mode, concurrency, with_downstream, state, requested_by,
  reason, created_at, ended_at, cancelled_by`;

export async function insertBackfill(
  db: Queryable,
  row: Omit<BackfillRow, "state" | "created_at" | "ended_at" | "cancelled_by">,
  slots: readonly { slot: Date; state: "pending" | "skipped"; detail: string | null }[],
): Promise<BackfillRow> {
  const result = await db.query<BackfillRow>(
    `INSERT INTO "${BACKFILLS_TABLE}" (id, task, from_at, to_at, mode, concurrency, with_downstream, state, requested_by, reason)
       VALUES ($1, $2, $3, $4, $5, $6, $7, 'running', $8, $9) RETURNING ${BACKFILL_COLUMNS}`,
    [
      row.id,
      row.task,
      row.from_at,
      row.to_at,
      row.mode,
      row.concurrency,
      row.with_downstream,
      row.requested_by,
      row.reason,
    ],
  );
  await db.query(
    `INSERT INTO "${BACKFILL_SLOTS_TABLE}" (backfill_id, slot, state, detail, ended_at)
       SELECT $1, s.slot, s.state, s.detail, CASE WHEN s.state = 'skipped' THEN now() END
         FROM jsonb_to_recordset($2::jsonb) AS s(slot TIMESTAMPTZ, state TEXT, detail TEXT)`,
    [row.id, JSON.stringify(slots.map((slot) => ({ ...slot, slot: slot.slot.toISOString() })))],
  );
  // a range whose every slot was skipped has nothing to run
  await finishIfDone(db, row.id);
  const created = await selectBackfill(db, row.id);
  return created ?? (result.rows[0] as BackfillRow);
}

/** A running backfill of the same task whose range meets [from, to]: its slots would run twice. */
export async function selectOverlappingBackfill(
  db: Queryable,
  task: string,
  from: Date,
  to: Date,
): Promise<BackfillRow | undefined> {
  const result = await db.query<BackfillRow>(
    `SELECT ${BACKFILL_COLUMNS} FROM "${BACKFILLS_TABLE}"
      WHERE task = $1 AND state = 'running' AND from_at <= $3 AND to_at >= $2 LIMIT 1`,
    [task, from, to],
  );
  return result.rows[0];
}

/** The slots of a task in [from, to] that have a succeeded run record (ISO text, as the run log keeps them). */
export async function selectSucceededSlots(
  db: Queryable,
  task: string,
  from: Date,
  to: Date,
): Promise<Set<string>> {
  const slot = metaText("scheduledAt");
  const result = await db.query<{ slot: string }>(
    `SELECT DISTINCT ${slot} AS slot FROM "${LOGS_TABLE}"
      WHERE job_name = $1 AND ${slot} >= $2 AND ${slot} <= $3
        AND event = 'success' AND ${metaText("outcome")} = 'succeeded'`,
    [task, from.toISOString(), to.toISOString()],
  );
  return new Set(result.rows.map((row) => row.slot));
}

export async function selectBackfill(db: Queryable, id: string): Promise<BackfillRow | undefined> {
  const result = await db.query<BackfillRow>(
    `SELECT ${BACKFILL_COLUMNS} FROM "${BACKFILLS_TABLE}" WHERE id = $1`,
    [id],
  );
  return result.rows[0];
}

export async function selectBackfills(
  db: Queryable,
  query: { task?: string | undefined; limit: number },
): Promise<BackfillRow[]> {
  const result = await db.query<BackfillRow>(
    `SELECT ${BACKFILL_COLUMNS} FROM "${BACKFILLS_TABLE}"
      WHERE ($1::text IS NULL OR task = $1) ORDER BY created_at DESC, id LIMIT $2`,
    [query.task ?? null, query.limit],
  );
  return result.rows;
}

/** How many slots of each backfill are in each state. */
export async function selectBackfillCounts(
  db: Queryable,
  ids: readonly string[],
): Promise<Map<string, Record<BackfillSlotState, number>>> {
  const result = await db.query<{ backfill_id: string; state: BackfillSlotState; n: string }>(
    `SELECT backfill_id, state, count(*) AS n FROM "${BACKFILL_SLOTS_TABLE}"
      WHERE backfill_id = ANY($1::uuid[]) GROUP BY backfill_id, state`,
    [ids],
  );
  const counts = new Map<string, Record<BackfillSlotState, number>>();
  for (const id of ids)
    counts.set(id, { pending: 0, running: 0, succeeded: 0, failed: 0, skipped: 0, cancelled: 0 });
  for (const row of result.rows) {
    const entry = counts.get(row.backfill_id);
    if (entry) entry[row.state] = Number(row.n);
  }
  return counts;
}

export interface BackfillSlotRow {
  slot: Date;
  state: BackfillSlotState;
  runs: number;
  locked_by: string | null;
  started_at: Date | null;
  ended_at: Date | null;
  detail: string | null;
}

export async function selectBackfillSlots(
  db: Queryable,
  id: string,
  limit: number,
): Promise<BackfillSlotRow[]> {
  const result = await db.query<BackfillSlotRow>(
    `SELECT slot, state, runs, locked_by, started_at, ended_at, detail FROM "${BACKFILL_SLOTS_TABLE}"
      WHERE backfill_id = $1 ORDER BY slot LIMIT $2`,
    [id, limit],
  );
  return result.rows;
}

/** Cancels a running backfill: its pending slots are not run; running ones finish. Undefined: not running. */
export async function cancelBackfill(
  db: Queryable,
  id: string,
  by: string,
): Promise<BackfillRow | undefined> {
  const result = await db.query<BackfillRow>(
    `UPDATE "${BACKFILLS_TABLE}" SET state = 'cancelled', ended_at = now(), cancelled_by = $2
      WHERE id = $1 AND state = 'running' RETURNING ${BACKFILL_COLUMNS}`,
    [id, by],
  );
  if (result.rows[0])
    await db.query(
      `UPDATE "${BACKFILL_SLOTS_TABLE}" SET state = 'cancelled', ended_at = now(), detail = 'backfill cancelled'
        WHERE backfill_id = $1 AND state = 'pending'`,
      [id],
    );
  return result.rows[0];
}

/** A running backfill with no pending or running slot left is done. */
export async function finishIfDone(db: Queryable, id: string): Promise<void> {
  await db.query(
    `UPDATE "${BACKFILLS_TABLE}" b SET state = 'done', ended_at = now()
      WHERE b.id = $1 AND b.state = 'running' AND NOT EXISTS (
        SELECT 1 FROM "${BACKFILL_SLOTS_TABLE}" s WHERE s.backfill_id = b.id AND s.state IN ('pending', 'running'))`,
    [id],
  );
}

/** Whether any backfill of the given tasks is running: the idle check, one plain statement. */
export async function anyRunningBackfill(db: Queryable, tasks: readonly string[]): Promise<boolean> {
  const result = await db.query<{ running: boolean }>(
    `SELECT EXISTS (SELECT 1 FROM "${BACKFILLS_TABLE}" WHERE state = 'running' AND task = ANY($1::text[])) AS running`,
    [tasks],
  );
  return result.rows[0]?.running === true;
}

/**
 * The running backfills of the given tasks, oldest first, each row locked for the claim. An
 * instance waits for another's claim of the same backfill (a short transaction) rather than skip
 * it: with SKIP LOCKED, the instance whose runs end most often kept the row and claimed every
 * slot, and the others' passes found it locked.
 */
export async function lockRunningBackfills(
  db: Queryable,
  tasks: readonly string[],
): Promise<(BackfillRow & { job_id: string | null })[]> {
  const result = await db.query<BackfillRow & { job_id: string | null }>(
    `SELECT ${BACKFILL_COLUMNS},
            (SELECT j.id::text FROM "${JOBS_TABLE}" j WHERE j.name = b.task AND j.type = 'single' LIMIT 1) AS job_id
       FROM "${BACKFILLS_TABLE}" b
      WHERE state = 'running' AND task = ANY($1::text[])
      ORDER BY created_at
      FOR UPDATE OF b`,
    [tasks],
  );
  return result.rows;
}

/** Registered instances whose liveness lock is gone (src/engine/sql/instances.ts has the same test). */
const DEAD_HOLDERS = `
  SELECT i.instance_id FROM "${INSTANCES_TABLE}" i
   WHERE i.server_started_at = pg_postmaster_start_time()
     AND NOT EXISTS (
       SELECT 1 FROM pg_locks l
        WHERE l.locktype = 'advisory' AND l.objsubid = 2 AND l.granted
          AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
          AND l.classid = ${LIVENESS_LOCK_NAMESPACE}::bigint::oid
          AND l.objid = (hashtext(i.instance_id)::bigint & 4294967295)::oid)`;

export interface ClaimedSlotRow {
  slot: Date;
  runs: number;
  /** For a takeover: the run that held the slot before (its start and instance). */
  previous_started_at: Date | null;
  previous_holder: string | null;
}

/**
 * Claims up to `concurrency` minus the slots running under a live lock, in slot order: pending
 * slots, and running slots whose lock expired (`deadline`) or whose holder is dead. Called with the
 * backfill's row locked (lockRunningBackfills), so no other instance counts or claims it meanwhile.
 * An instance holds at most its share of the concurrency (divided among the registered instances):
 * the instance whose runs end first would otherwise claim every slot freed, and the others none.
 */
export async function claimBackfillSlots(
  db: Queryable,
  claim: { id: string; concurrency: number; owner: string; lockAt: Date; deadline: Date; max: number },
): Promise<ClaimedSlotRow[]> {
  const result = await db.query<ClaimedSlotRow>(
    `WITH dead AS (${DEAD_HOLDERS}),
     busy AS (
       SELECT count(*) AS n, count(*) FILTER (WHERE locked_by = $3) AS mine FROM "${BACKFILL_SLOTS_TABLE}"
        WHERE backfill_id = $1 AND state = 'running' AND locked_at > $5
          AND locked_by NOT IN (SELECT instance_id FROM dead)
     ), share AS (
       SELECT ceil($2::numeric / greatest(1, (SELECT count(*) FROM "${INSTANCES_TABLE}")))::int AS n
     ), candidates AS (
       SELECT slot, started_at, locked_by, state FROM "${BACKFILL_SLOTS_TABLE}"
        WHERE backfill_id = $1 AND (state = 'pending' OR (state = 'running'
              AND (locked_at IS NULL OR locked_at <= $5 OR locked_by IN (SELECT instance_id FROM dead))))
        ORDER BY slot
        LIMIT least(
          $6::int,
          greatest(0, $2::int - (SELECT n FROM busy)::int),
          greatest(0, (SELECT n FROM share) - (SELECT mine FROM busy)::int))
        FOR UPDATE SKIP LOCKED
     )
     UPDATE "${BACKFILL_SLOTS_TABLE}" s
        SET state = 'running', locked_at = $4, locked_by = $3, runs = s.runs + 1, started_at = NULL
       FROM candidates c
      WHERE s.backfill_id = $1 AND s.slot = c.slot
      RETURNING s.slot, s.runs,
        CASE WHEN c.state = 'running' THEN c.started_at END AS previous_started_at,
        CASE WHEN c.state = 'running' THEN c.locked_by END AS previous_holder`,
    [claim.id, claim.concurrency, claim.owner, claim.lockAt, claim.deadline, claim.max],
  );
  return result.rows.sort((a, b) => a.slot.getTime() - b.slot.getTime());
}

/** The slot's lock, fenced on the time its holder wrote last; false: no longer this holder's. */
export async function renewBackfillSlot(
  db: Queryable,
  key: { id: string; slot: Date; owner: string },
  expected: Date,
  next: Date,
  started?: Date,
): Promise<boolean> {
  const result = await db.query(
    `UPDATE "${BACKFILL_SLOTS_TABLE}" SET locked_at = $5, started_at = coalesce($6, started_at)
      WHERE backfill_id = $1 AND slot = $2 AND state = 'running' AND locked_by = $3 AND locked_at = $4`,
    [key.id, key.slot, key.owner, expected, next, started ?? null],
  );
  return (result.rowCount ?? 0) > 0;
}

/**
 * A running backfill slot's fenced lock renewal, in the shape of RENEW_LOCK_SQL (src/engine/sql/
 * claim.ts), so that the lock keeper's thread renews it as it renews a job row's
 * (src/engine/lockKeeper.ts): $1 backfill id, $2 slot, $3 owner, $4 the lock time held, $5 the new
 * one. One row back: `renewed`, and when not, who holds the slot now (none once it ended or was
 * handed back); no row: the backfill is gone.
 */
export const RENEW_BACKFILL_SLOT_SQL = `
  WITH renewed AS (
    UPDATE "${BACKFILL_SLOTS_TABLE}" SET locked_at = $5
     WHERE backfill_id = $1 AND slot = $2 AND state = 'running' AND locked_by = $3 AND locked_at = $4
    RETURNING 1)
  SELECT EXISTS (SELECT 1 FROM renewed) AS renewed,
         CASE WHEN state = 'running' THEN locked_by END AS holder,
         CASE WHEN state = 'running' THEN locked_at END AS held_at
    FROM "${BACKFILL_SLOTS_TABLE}" WHERE backfill_id = $1 AND slot = $2`;

/** The key of a backfill slot's lock, as RENEW_BACKFILL_SLOT_SQL's first parameters. */
export function backfillSlotLockKey(key: { id: string; slot: Date; owner: string }): unknown[] {
  return [key.id, key.slot, key.owner];
}

/** Who holds a backfill slot's lock now (its holder and lock time; none when it ended or was handed back). */
export async function selectBackfillSlotHolder(
  db: Queryable,
  key: { id: string; slot: Date },
): Promise<{ holder: string | null; heldAt: Date | null } | undefined> {
  const result = await db.query<{ locked_by: string | null; locked_at: Date | null; state: string }>(
    `SELECT locked_by, locked_at, state FROM "${BACKFILL_SLOTS_TABLE}" WHERE backfill_id = $1 AND slot = $2`,
    [key.id, key.slot],
  );
  const row = result.rows[0];
  if (!row) return undefined;
  return row.state === "running"
    ? { holder: row.locked_by, heldAt: row.locked_at }
    : { holder: null, heldAt: null };
}

/** The slot's end, fenced like a renewal: its state (or pending again, handed to another instance). */
export async function endBackfillSlot(
  db: Queryable,
  key: { id: string; slot: Date; owner: string },
  fence: Date,
  end: { state: BackfillSlotState; detail: string | null },
): Promise<boolean> {
  const result = await db.query(
    `UPDATE "${BACKFILL_SLOTS_TABLE}"
        SET state = $5, detail = $6, locked_at = NULL,
            ended_at = CASE WHEN $5 = 'pending' THEN NULL ELSE now() END
      WHERE backfill_id = $1 AND slot = $2 AND state = 'running' AND locked_by = $3 AND locked_at = $4`,
    [key.id, key.slot, key.owner, fence, end.state, end.detail],
  );
  return (result.rowCount ?? 0) > 0;
}

/** A backfill's running slot of this task and slot, if any (a re-run of that slot waits for it). */
export async function backfillSlotRunning(db: Queryable, task: string, slot: Date): Promise<boolean> {
  const result = await db.query(
    `SELECT 1 FROM "${BACKFILL_SLOTS_TABLE}" s JOIN "${BACKFILLS_TABLE}" b ON b.id = s.backfill_id
      WHERE b.task = $1 AND s.slot = $2 AND s.state = 'running' LIMIT 1`,
    [task, slot],
  );
  return (result.rowCount ?? 0) > 0;
}

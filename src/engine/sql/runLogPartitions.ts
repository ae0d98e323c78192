import type { PoolClient } from "pg";
import { SCHEDULER_DEFAULTS } from "../../core/defaults.js";
import { LOGS_TABLE, type Queryable } from "./tables.js";

/**
 * The run log (Agenda's job log table) partitioned by time: PostgreSQL's declarative range
 * partitioning on `timestamp`, one partition per `runLogPartitionHours` (a day by default,
 * aligned to UTC), so that retention by age drops whole partitions instead of deleting rows
 * (docs/design.md, "Run history partitions"). Schema version 11 (src/engine/schema.ts).
 *
 * Agenda reads and writes the parent as before (PostgresJobLogger's insert, getLogs, clearLogs):
 * a partitioned table takes the same statements. There is no default partition: PostgreSQL's
 * DETACH PARTITION CONCURRENTLY, which lets retention drop a partition without a lock that
 * blocks the runs' inserts, is refused on a table that has one. A row for a time no partition
 * covers is written after its partition is created (coverRunLog, from the write path's retry in
 * src/engine/sql/runLog.ts).
 */

/** The table the run log was before version 11, kept as the partition of every time before its conversion. */
export const LEGACY_PARTITION = `${LOGS_TABLE}_legacy`;

/** The partitions' names: this prefix and the UTC start (`agenda_logs_p20261207`, `_0600` when not at midnight). */
export const PARTITION_PREFIX = `${LOGS_TABLE}_p`;

/** Lists the partitions: name, lower and upper bound (-infinity for MINVALUE), and an unfinished detach. */
export const PARTITIONS_FUNCTION = "cronwarden_run_log_partitions";
/** Creates the partitions that cover a time range (SECURITY DEFINER: the service role may not create tables). */
export const COVER_FUNCTION = "cronwarden_run_log_cover";
/** Detaches and drops one partition for a role that does not own the table (SECURITY DEFINER). */
export const DROP_FUNCTION = "cronwarden_run_log_drop";

/** Serializes the creation of partitions across instances (pg_advisory_xact_lock; "cw" + purpose, beside src/engine/sql/tables.ts's keys). */
export const PARTITION_LOCK_KEY = 0x6377_0005;

/** A partition's width unless `runLogPartitionHours` says otherwise (the migration's: a day). */
export const DEFAULT_PARTITION_HOURS: number = SCHEDULER_DEFAULTS.runLogPartitionHours;

/** How far ahead of now the partitions exist: created on start and hourly (src/scheduler/retention.ts). */
export const PARTITIONS_AHEAD_MS = 3 * 86_400_000;

/**
 * The partition bounds as PostgreSQL prints them (`FOR VALUES FROM ('...') TO ('...')`, in the
 * session's DateStyle and time zone, which the cast back to timestamptz reads the same way).
 */
export const CREATE_PARTITIONS_FUNCTION = `
  CREATE OR REPLACE FUNCTION ${PARTITIONS_FUNCTION}()
  RETURNS TABLE (name text, lower timestamptz, upper timestamptz, detach_pending boolean)
  LANGUAGE sql STABLE AS $body$
    SELECT c.relname::text,
           CASE WHEN b.expr LIKE 'FOR VALUES FROM (MINVALUE)%' THEN '-infinity'::timestamptz
                ELSE substring(b.expr FROM 'FROM \\(''([^'']*)''\\)')::timestamptz END,
           CASE WHEN b.expr LIKE '%TO (MAXVALUE)' THEN 'infinity'::timestamptz
                ELSE substring(b.expr FROM 'TO \\(''([^'']*)''\\)')::timestamptz END,
           i.inhdetachpending
      FROM pg_inherits i
      JOIN pg_class c ON c.oid = i.inhrelid
     CROSS JOIN LATERAL (SELECT pg_get_expr(c.relpartbound, c.oid) AS expr) b
     WHERE i.inhparent = '${LOGS_TABLE}'::regclass
  $body$`;

/**
 * Creates partitions of `width_hours` (aligned to the epoch, so days start at 00:00 UTC) for
 * every part of [from_time, to_time) that no partition covers, clipped to the gaps between
 * existing ones (a changed width never overlaps). Each is created as a plain table and then
 * attached: ATTACH PARTITION takes SHARE UPDATE EXCLUSIVE on the parent, which the runs' inserts
 * and reads do not wait for, where CREATE TABLE ... PARTITION OF takes ACCESS EXCLUSIVE.
 * Several instances at once: the transaction-level advisory lock makes them one after the other,
 * and each sees the partitions the one before created. Returns the number created.
 */
export const CREATE_COVER_FUNCTION = `
  CREATE OR REPLACE FUNCTION ${COVER_FUNCTION}(width_hours integer, from_time timestamptz, to_time timestamptz)
  RETURNS integer LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $body$
  DECLARE
    width_s double precision := width_hours * 3600;
    slot timestamptz;
    lo timestamptz;
    hi timestamptz;
    slot_end timestamptz;
    found_upper timestamptz;
    next_lower timestamptz;
    part text;
    created integer := 0;
  BEGIN
    IF width_hours IS NULL OR width_hours < 1 THEN
      RAISE EXCEPTION 'the run log''s partition width must be at least 1 hour, not %', width_hours;
    END IF;
    PERFORM pg_advisory_xact_lock(${PARTITION_LOCK_KEY});
    slot := to_timestamp(floor(extract(epoch FROM from_time) / width_s) * width_s);
    WHILE slot < to_time LOOP
      slot_end := slot + make_interval(hours => width_hours);
      lo := slot;
      WHILE lo < slot_end LOOP
        -- skip what a partition covers already
        SELECT p.upper INTO found_upper FROM ${PARTITIONS_FUNCTION}() p WHERE p.lower <= lo AND p.upper > lo;
        IF found_upper IS NOT NULL THEN
          lo := found_upper;
          CONTINUE;
        END IF;
        SELECT min(p.lower) INTO next_lower FROM ${PARTITIONS_FUNCTION}() p WHERE p.lower > lo AND p.lower < slot_end;
        hi := coalesce(next_lower, slot_end);
        part := '${PARTITION_PREFIX}' || to_char(lo AT TIME ZONE 'UTC', 'YYYYMMDD')
                || CASE WHEN to_char(lo AT TIME ZONE 'UTC', 'HH24MI') = '0000' THEN ''
                        ELSE '_' || to_char(lo AT TIME ZONE 'UTC', 'HH24MI') END;
        -- a table of that name left by a drop cut off after its detach (src/engine/sql/runLogPartitions.ts dropPartition)
        EXECUTE format('DROP TABLE IF EXISTS %I', part);
        EXECUTE format('CREATE TABLE %I (LIKE %I INCLUDING DEFAULTS INCLUDING STORAGE)', part, '${LOGS_TABLE}');
        EXECUTE format('ALTER TABLE %I ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)', '${LOGS_TABLE}', part, lo, hi);
        created := created + 1;
        lo := hi;
      END LOOP;
      slot := slot_end;
    END LOOP;
    RETURN created;
  END $body$`;

/**
 * Detaches and drops one partition, for a role that does not own the run log (the service role
 * of docs/operations.md): DETACH PARTITION CONCURRENTLY needs the owner and cannot run in a
 * function, so this one takes the parent's ACCESS EXCLUSIVE lock, for at most a second of
 * waiting (then it fails, and the next hour tries again) and the few milliseconds of the drop.
 */
export const CREATE_DROP_FUNCTION = `
  CREATE OR REPLACE FUNCTION ${DROP_FUNCTION}(part text) RETURNS void
  LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $body$
  BEGIN
    IF NOT EXISTS (SELECT 1 FROM ${PARTITIONS_FUNCTION}() p WHERE p.name = part) THEN
      RAISE EXCEPTION '% is not a partition of the run log', part;
    END IF;
    PERFORM set_config('lock_timeout', '1000', true);
    EXECUTE format('ALTER TABLE %I DETACH PARTITION %I', '${LOGS_TABLE}', part);
    EXECUTE format('DROP TABLE %I', part);
  END $body$`;

export interface RunLogPartition {
  name: string;
  /** null: the legacy partition's MINVALUE. */
  lower: Date | null;
  upper: Date;
  detachPending: boolean;
}

export async function listPartitions(db: Queryable): Promise<RunLogPartition[]> {
  const { rows } = await db.query<{ name: string; lower: Date | null; upper: Date; detach_pending: boolean }>(
    `SELECT name, CASE WHEN lower = '-infinity' THEN NULL ELSE lower END AS lower, upper, detach_pending
       FROM ${PARTITIONS_FUNCTION}() ORDER BY upper`,
  );
  return rows.map((row) => ({
    name: row.name,
    lower: row.lower,
    upper: row.upper,
    detachPending: row.detach_pending,
  }));
}

/** Creates the partitions that cover [from, to) where none does; returns how many it created. */
export async function coverRunLog(db: Queryable, widthHours: number, from: Date, to: Date): Promise<number> {
  const { rows } = await db.query<{ created: number }>(`SELECT ${COVER_FUNCTION}($1, $2, $3) AS created`, [
    widthHours,
    from,
    to,
  ]);
  return rows[0]?.created ?? 0;
}

/** The partitions for now and PARTITIONS_AHEAD_MS ahead (at least three widths). */
export function ensurePartitionsAhead(db: Queryable, widthHours: number, now: Date): Promise<number> {
  const ahead = Math.max(PARTITIONS_AHEAD_MS, 3 * widthHours * 3_600_000);
  return coverRunLog(db, widthHours, now, new Date(now.getTime() + ahead));
}

/** PostgreSQL's refusal of a row no partition takes ("no partition of relation ... found for row"). */
export function isNoPartitionError(error: unknown): boolean {
  const { code, message } = error as { code?: unknown; message?: unknown };
  return code === "23514" && typeof message === "string" && message.includes("no partition");
}

/**
 * Drops the partitions whose every row is older than `before` (their upper bound at or before
 * it), oldest first; returns the rows they held (PostgreSQL's count of each, read before the
 * drop). The legacy partition (from MINVALUE) is one of them once its upper bound is.
 */
export async function dropPartitionsBefore(client: PoolClient, before: Date): Promise<number> {
  let rows = 0;
  for (const partition of await listPartitions(client)) {
    if (partition.upper.getTime() > before.getTime()) break;
    rows += await dropPartition(client, partition);
  }
  return rows;
}

/** Rows below this many are counted; above, PostgreSQL's estimate (a count of a day at 10,000 minute tasks takes seconds). */
const COUNTED_ROWS = 100_000;

async function partitionRows(client: PoolClient, name: string): Promise<number> {
  const estimate = await client.query<{ rows: number }>(
    "SELECT reltuples::float8 AS rows FROM pg_class WHERE oid = to_regclass(quote_ident($1))",
    [name],
  );
  const rows = estimate.rows[0]?.rows ?? -1;
  if (rows >= COUNTED_ROWS) return Math.round(rows);
  const counted = await client.query<{ count: number }>(`SELECT count(*)::int AS count FROM "${name}"`);
  return counted.rows[0]?.count ?? 0;
}

/**
 * Tables left detached by a drop cut off between its detach and its drop (named as partitions
 * are, and no longer one): dropped, with the rows they held.
 */
export async function dropDetachedPartitions(client: PoolClient): Promise<number> {
  const { rows } = await client.query<{ name: string }>(
    `SELECT c.relname AS name FROM pg_class c
      WHERE c.relkind = 'r' AND NOT c.relispartition AND c.relnamespace = (SELECT relnamespace FROM pg_class WHERE oid = '${LOGS_TABLE}'::regclass)
        AND (c.relname ~ '^${PARTITION_PREFIX}[0-9]{8}(_[0-9]{4})?$' OR c.relname = '${LEGACY_PARTITION}')`,
  );
  let total = 0;
  for (const { name } of rows) {
    const count = await partitionRows(client, name);
    try {
      await client.query(`DROP TABLE IF EXISTS "${name}"`);
      total += count;
    } catch (error) {
      // a role that does not own it (DROP_FUNCTION's drops leave none behind)
      if ((error as { code?: unknown }).code !== "42501") throw error;
    }
  }
  return total;
}

/**
 * One partition: DETACH PARTITION CONCURRENTLY (SHARE UPDATE EXCLUSIVE on the parent: inserts and
 * reads go on; it waits for the transactions that use the table to end), then DROP TABLE on the
 * detached table alone. A detach cut off half-way (its connection lost) is finished (FINALIZE).
 * Without the owner's rights, DROP_FUNCTION does it with a brief exclusive lock.
 */
async function dropPartition(client: PoolClient, partition: RunLogPartition): Promise<number> {
  const count = await partitionRows(client, partition.name);
  try {
    await client.query(
      `ALTER TABLE "${LOGS_TABLE}" DETACH PARTITION "${partition.name}" ${partition.detachPending ? "FINALIZE" : "CONCURRENTLY"}`,
    );
  } catch (error) {
    if ((error as { code?: unknown }).code !== "42501") throw error;
    await client.query(`SELECT ${DROP_FUNCTION}($1)`, [partition.name]);
    return count;
  }
  await client.query(`DROP TABLE IF EXISTS "${partition.name}"`);
  return count;
}

/**
 * Schema step 11: the run log becomes a partitioned table, in place and once (a partitioned one is
 * left as it is). The table as it was is renamed LEGACY_PARTITION (its indexes too) and attached
 * as the partition of every time up to the end of the day of its latest row (or of today), so
 * its rows stay where they are and read as before: the attach reads every row once to check the
 * bound and builds the primary key (id, timestamp) on it; the parent's other indexes take its
 * own, built the same way (`createIndexes`). Its old primary key on (id) alone gives way to the
 * parent's (a table has one). The privileges granted on the table are granted on the parent again.
 * Then the partitions for now and the days ahead.
 */
export async function partitionRunLog(
  client: PoolClient,
  createIndexes: (client: PoolClient) => Promise<void>,
): Promise<void> {
  await client.query(CREATE_PARTITIONS_FUNCTION);
  await client.query(CREATE_COVER_FUNCTION);
  await client.query(CREATE_DROP_FUNCTION);
  const kind = await client.query<{ relkind: string }>(
    `SELECT relkind FROM pg_class WHERE oid = to_regclass('"${LOGS_TABLE}"')`,
  );
  if (kind.rows[0]?.relkind === "p") return;
  // the database's time: the migration runs outside the engine's clock (src/core/clock.ts)
  const now = (await client.query<{ now: Date }>("SELECT now() AS now")).rows[0]?.now ?? new Date(0);
  await client.query(`ALTER TABLE "${LOGS_TABLE}" RENAME TO "${LEGACY_PARTITION}"`);
  const indexes = await client.query<{ name: string }>(
    `SELECT c.relname AS name FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
      WHERE i.indrelid = '"${LEGACY_PARTITION}"'::regclass`,
  );
  for (const { name } of indexes.rows) {
    const renamed = (
      name.startsWith(LOGS_TABLE)
        ? LEGACY_PARTITION + name.slice(LOGS_TABLE.length)
        : `${LEGACY_PARTITION}_${name}`
    ).slice(0, 63);
    await client.query(`ALTER INDEX "${name}" RENAME TO "${renamed}"`);
  }
  await client.query(
    `CREATE TABLE "${LOGS_TABLE}" (LIKE "${LEGACY_PARTITION}" INCLUDING DEFAULTS INCLUDING STORAGE,
       PRIMARY KEY (id, timestamp)) PARTITION BY RANGE (timestamp)`,
  );
  await regrant(client);
  await createIndexes(client);
  const width = DEFAULT_PARTITION_HOURS * 3_600_000;
  const latest = await client.query<{ latest: Date | null }>(
    `SELECT max(timestamp) AS latest FROM "${LEGACY_PARTITION}"`,
  );
  const last = Math.max(now.getTime(), latest.rows[0]?.latest?.getTime() ?? 0);
  const bound = new Date((Math.floor(last / width) + 1) * width);
  const primaryKey = await client.query<{ name: string }>(
    `SELECT conname AS name FROM pg_constraint WHERE conrelid = '"${LEGACY_PARTITION}"'::regclass AND contype = 'p'`,
  );
  for (const { name } of primaryKey.rows)
    await client.query(`ALTER TABLE "${LEGACY_PARTITION}" DROP CONSTRAINT "${name}"`);
  await client.query(
    `ALTER TABLE "${LOGS_TABLE}" ATTACH PARTITION "${LEGACY_PARTITION}" FOR VALUES FROM (MINVALUE) TO ('${bound.toISOString()}')`,
  );
  await ensurePartitionsAhead(client, DEFAULT_PARTITION_HOURS, now);
}

/** The privileges granted on the table before (to other roles than its owner), granted on the parent. */
async function regrant(client: PoolClient): Promise<void> {
  const { rows } = await client.query<{ grantee: string | null; privilege: string }>(
    `SELECT CASE WHEN a.grantee = 0 THEN NULL ELSE a.grantee::regrole::text END AS grantee, a.privilege_type AS privilege
       FROM pg_class c CROSS JOIN LATERAL aclexplode(c.relacl) a
      WHERE c.oid = '"${LEGACY_PARTITION}"'::regclass AND a.grantee <> c.relowner`,
  );
  for (const { grantee, privilege } of rows)
    await client.query(`GRANT ${privilege} ON "${LOGS_TABLE}" TO ${grantee ?? "PUBLIC"}`);
}

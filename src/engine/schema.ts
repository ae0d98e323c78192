import {
  getCreateIndexesSQL,
  getCreateLogsIndexesSQL,
  getCreateLogsTableSQL,
  getCreateTableSQL,
  getUpdateTimestampTriggerSQL,
} from "@agendajs/postgres-backend";
import type { Pool, PoolClient } from "pg";
import { CronwardenError } from "../core/errors.js";
import { withAdvisoryLock } from "../db/advisoryLock.js";
import {
  ADD_CONVERGED_COLUMNS,
  AUDIT_TABLE,
  DESIRED_STATE_TABLE,
  STORE_MIGRATIONS,
} from "../store/schema.js";
import {
  ADD_INSTANCE_COLUMNS,
  BACKFILL_SLOTS_TABLE,
  BACKFILLS_TABLE,
  CREATE_BACKFILLS,
  CREATE_DEPENDENCY_WAITS,
  CREATE_DUE_INDEX,
  CREATE_INSTANCE_DEATHS,
  CREATE_PAUSE_TABLE,
  CREATE_RUN_STARTS,
  CREATE_SEARCH_FUNCTION,
  CREATE_SEARCH_INDEX,
  CREATE_SHARD_TABLES,
  createSlotIndex,
  DEPENDENCY_WAITS_TABLE,
  INSTANCE_DEATHS_TABLE,
  INSTANCES_TABLE,
  JOBS_TABLE,
  LOGS_TABLE,
  PAUSE_TABLE,
  partitionRunLog,
  RUN_STARTS_TABLE,
  SCHEMA_LOCK_KEY,
  SHARD_SLOTS_TABLE,
  SHARDS_TABLE,
  SLOT_INDEX,
  UNFINISHED_INDEXES,
} from "./sql.js";

/**
 * Agenda's run-log index by job id and time: nothing in cronwarden reads the log by job id but
 * its unfinished starts (their own partial index), and it was a tenth of a run's bytes
 * (docs/operations.md, "Run history"). Agenda's `getLogs({ jobId })` still works, by a scan; by
 * `jobName` it has its index.
 */
const AGENDA_JOB_ID_INDEX = `${LOGS_TABLE}_job_id_idx`;

/** One row: the schema version `migrateSchema` last brought the database to. */
export const SCHEMA_TABLE = "cronwarden_schema";
/**
 * The steps from one schema version to the next: cronwarden's tables (src/store/schema.ts), then
 * 3: the run log's index by task and slot, for the timeline and the run history (src/engine/sql/runLog.ts);
 * 4: the registry of instances whose liveness lock tells whether they are alive (src/engine/liveness.ts);
 * 5: `resume` entries in the audit trail (a task paused by failure resumed through the API);
 * 6: the table of dependency waits (docs/dependencies.md);
 * 7: the claim's index of due jobs (src/engine/sql/claim.ts CREATE_DUE_INDEX);
 * 8: operations (docs/operations.md): the pause-all switch (src/engine/sql/pauseAll.ts) and its
 *    `pause-all`/`resume-all` audit entries, the instances' self-description and last check, their
 *    recorded deaths (src/engine/sql/instances.ts), and the run log's search index
 *    (src/engine/sql/runSearch.ts; on a large run log this step takes a while: it reads every row).
 * 9: backfills and their slots (src/engine/sql/backfills.ts), and `rerun`, `backfill` and
 *    `backfill-cancel` entries in the audit trail, beside step 8's (docs/operations.md, "Re-run a
 *    slot", "Backfill").
 * 10: one run-log row per finished run: the runs in progress in their own table, the partial
 *    indexes of the log's unfinished starts (src/engine/sql/runStarts.ts, runLog.ts), and without
 *    Agenda's index by job id (AGENDA_JOB_ID_INDEX); the slot index without the id.
 * 11: the run log partitioned by time (src/engine/sql/runLogPartitions.ts): the table as it was
 *    becomes the partition of the times before, with its rows; retention drops whole partitions
 *    (on a large run log this step reads every row once and builds its primary key (id, timestamp)).
 * 12: sharded tasks (docs/sharding.md): a row per sharded slot and one per shard (src/engine/sql/shards.ts).
 * 13: the shared record of the last converged reconcile (revision, planner key, rows' digest) beside
 *    the applied snapshot (src/store/statements.ts SAVE_CONVERGED, src/reconcile/sharedConverged.ts).
 */
const MIGRATIONS: ReadonlyArray<(client: PoolClient) => Promise<void>> = [
  ...STORE_MIGRATIONS,
  (client) => createSlotIndex(client),
  async (client) => {
    await client.query(`
      CREATE TABLE IF NOT EXISTS "${INSTANCES_TABLE}" (
        instance_id       TEXT PRIMARY KEY,
        started_at        TIMESTAMPTZ NOT NULL DEFAULT now(),
        server_started_at TIMESTAMPTZ NOT NULL DEFAULT pg_postmaster_start_time()
      )`);
  },
  async (client) => {
    await client.query(`ALTER TABLE "${AUDIT_TABLE}" DROP CONSTRAINT IF EXISTS "${AUDIT_TABLE}_kind_check"`);
    await client.query(
      `ALTER TABLE "${AUDIT_TABLE}" ADD CONSTRAINT "${AUDIT_TABLE}_kind_check" CHECK (kind IN ('change', 'drift', 'run-now', 'resume'))`,
    );
  },
  // task dependencies: one row per (downstream, slot), the claim (docs/dependencies.md)
  async (client) => {
    await client.query(CREATE_DEPENDENCY_WAITS);
  },
  async (client) => {
    await client.query(CREATE_DUE_INDEX);
  },
  async (client) => {
    await client.query(CREATE_PAUSE_TABLE);
    await client.query(`ALTER TABLE "${AUDIT_TABLE}" DROP CONSTRAINT IF EXISTS "${AUDIT_TABLE}_kind_check"`);
    await client.query(
      `ALTER TABLE "${AUDIT_TABLE}" ADD CONSTRAINT "${AUDIT_TABLE}_kind_check" CHECK (kind IN ('change', 'drift', 'run-now', 'resume', 'pause-all', 'resume-all'))`,
    );
    await client.query(ADD_INSTANCE_COLUMNS);
    await client.query(CREATE_INSTANCE_DEATHS);
    await client.query(CREATE_SEARCH_FUNCTION);
    await client.query(CREATE_SEARCH_INDEX);
  },
  async (client) => {
    await client.query(CREATE_BACKFILLS);
    await client.query(`ALTER TABLE "${AUDIT_TABLE}" DROP CONSTRAINT IF EXISTS "${AUDIT_TABLE}_kind_check"`);
    await client.query(
      `ALTER TABLE "${AUDIT_TABLE}" ADD CONSTRAINT "${AUDIT_TABLE}_kind_check" CHECK (kind IN ('change', 'drift', 'run-now', 'resume', 'pause-all', 'resume-all', 'rerun', 'backfill', 'backfill-cancel'))`,
    );
  },
  async (client) => {
    await client.query(CREATE_RUN_STARTS);
    for (const statement of UNFINISHED_INDEXES) await client.query(statement);
    await client.query(`DROP INDEX IF EXISTS "${AGENDA_JOB_ID_INDEX}"`);
    // the slot index without the id (a database from before: built again, as the whole step, in one transaction)
    const slotIndex = await client.query(
      "SELECT 1 FROM pg_indexes WHERE indexname = $1 AND indexdef LIKE '%, id)%'",
      [SLOT_INDEX],
    );
    if ((slotIndex.rowCount ?? 0) > 0) {
      await client.query(`DROP INDEX "${SLOT_INDEX}"`);
      await createSlotIndex(client);
    }
  },
  (client) => partitionRunLog(client, createRunLogIndexes),
  async (client) => {
    await client.query(CREATE_SHARD_TABLES);
  },
  async (client) => {
    await client.query(ADD_CONVERGED_COLUMNS);
  },
];

/** The run log's indexes as the steps before 11 left them, built the same way (src/engine/sql/runLogPartitions.ts). */
async function createRunLogIndexes(client: PoolClient): Promise<void> {
  for (const statement of getCreateLogsIndexesSQL(LOGS_TABLE))
    if (!statement.includes(AGENDA_JOB_ID_INDEX)) await client.query(statement);
  await createSlotIndex(client);
  for (const statement of UNFINISHED_INDEXES) await client.query(statement);
  await client.query(CREATE_SEARCH_INDEX);
}
/** The version this code needs (the number of MIGRATIONS). */
export const SCHEMA_VERSION = MIGRATIONS.length;
/** Every table the service reads and writes at run time. */
export const SERVICE_TABLES = [
  JOBS_TABLE,
  LOGS_TABLE,
  DESIRED_STATE_TABLE,
  AUDIT_TABLE,
  SCHEMA_TABLE,
  INSTANCES_TABLE,
  DEPENDENCY_WAITS_TABLE,
  PAUSE_TABLE,
  INSTANCE_DEATHS_TABLE,
  BACKFILLS_TABLE,
  BACKFILL_SLOTS_TABLE,
  RUN_STARTS_TABLE,
  SHARD_SLOTS_TABLE,
  SHARDS_TABLE,
] as const;

/** The command that creates or upgrades the schema, named by every refusal. */
export const MIGRATE_COMMAND = "cronwarden migrate";

export interface MigrationResult {
  /** The version found; null on a database cronwarden never versioned (empty, or older than versions). */
  from: number | null;
  to: number;
}

/**
 * Creates or upgrades Agenda's tables and cronwarden's own, once, under a PostgreSQL advisory
 * lock, and records the version. Left to Agenda (`ensureSchema: true`), two instances starting
 * together on an empty database race on CREATE TABLE and one dies with an unhandled rejection
 * (docs/behaviour.md, "Agenda traps"). Needs a role that may create and alter tables (docs/operations.md). A database
 * already at a newer version than this code is left as it is.
 */
export async function migrateSchema(pool: Pool): Promise<MigrationResult> {
  const client = await pool.connect();
  try {
    return await withAdvisoryLock(client, SCHEMA_LOCK_KEY, async () => {
      // a current schema is left alone: no DDL (and no lock on the jobs table) at each start
      const before = await readState(client);
      if (before.current) return { from: before.version, to: before.version ?? SCHEMA_VERSION };
      await client.query(getCreateTableSQL(JOBS_TABLE));
      for (const statement of getCreateIndexesSQL(JOBS_TABLE)) await client.query(statement);
      await client.query(getUpdateTimestampTriggerSQL(JOBS_TABLE));
      await client.query(getCreateLogsTableSQL(LOGS_TABLE));
      for (const statement of getCreateLogsIndexesSQL(LOGS_TABLE))
        if (!statement.includes(AGENDA_JOB_ID_INDEX)) await client.query(statement);
      await client.query(`
        CREATE TABLE IF NOT EXISTS "${SCHEMA_TABLE}" (
          id           BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (id),
          version      INTEGER NOT NULL,
          migrated_at  TIMESTAMPTZ NOT NULL DEFAULT now()
        )`);
      const from = await readVersion(client);
      for (let version = (from ?? 0) + 1; version <= SCHEMA_VERSION; version++) {
        await client.query("BEGIN");
        try {
          await MIGRATIONS[version - 1]?.(client);
          await client.query(
            `INSERT INTO "${SCHEMA_TABLE}" (id, version) VALUES (TRUE, $1)
             ON CONFLICT (id) DO UPDATE SET version = EXCLUDED.version, migrated_at = now()`,
            [version],
          );
          await client.query("COMMIT");
        } catch (error) {
          await client.query("ROLLBACK").catch(() => {});
          throw error;
        }
      }
      return { from, to: Math.max(from ?? 0, SCHEMA_VERSION) };
    });
  } catch (error) {
    throw asSchemaError(error, "could not create or upgrade the schema");
  } finally {
    client.release();
  }
}

export interface SchemaState {
  /** null: no version recorded (an empty database, or one from before versions). */
  version: number | null;
  /** Tables the service needs that do not exist (or that this role cannot see). */
  missingTables: string[];
  current: boolean;
}

/** Reads the schema's state, changing nothing (any role that may read the tables). */
export async function inspectSchema(pool: Pool): Promise<SchemaState> {
  const client = await pool.connect();
  try {
    return await readState(client);
  } catch (error) {
    throw asSchemaError(error, "could not read the schema version");
  } finally {
    client.release();
  }
}

async function readState(client: PoolClient): Promise<SchemaState> {
  const { rows } = await client.query<{ name: string; present: boolean }>(
    "SELECT name, to_regclass(quote_ident(name)) IS NOT NULL AS present FROM unnest($1::text[]) AS name",
    [[...SERVICE_TABLES]],
  );
  const missingTables = rows.filter((row) => !row.present).map((row) => row.name);
  const version = missingTables.includes(SCHEMA_TABLE) ? null : await readVersion(client);
  return {
    version,
    missingTables,
    current: missingTables.length === 0 && version !== null && version >= SCHEMA_VERSION,
  };
}

/**
 * For a service that must not change the schema: throws CronwardenError SCHEMA_NOT_CURRENT,
 * naming `cronwarden migrate`, unless every table exists at the version this code needs.
 */
export async function checkSchema(pool: Pool): Promise<SchemaState> {
  const state = await inspectSchema(pool);
  if (state.current) return state;
  const found =
    state.missingTables.length === SERVICE_TABLES.length
      ? "the database has none of cronwarden's tables"
      : state.missingTables.length > 0
        ? `missing table(s): ${state.missingTables.join(", ")}`
        : `the schema is at version ${state.version ?? "(none)"}, this cronwarden needs version ${SCHEMA_VERSION}`;
  throw new CronwardenError(
    "SCHEMA_NOT_CURRENT",
    `the database schema is not current (${found}) and schema changes are turned off (migrate: false, CRONWARDEN_MIGRATE=false): run \`${MIGRATE_COMMAND}\` with a role that may change the schema (see docs/operations.md), then start again`,
  );
}

async function readVersion(client: PoolClient): Promise<number | null> {
  const { rows } = await client.query<{ version: number }>(`SELECT version FROM "${SCHEMA_TABLE}"`);
  return rows[0]?.version ?? null;
}

/** PostgreSQL's "permission denied" (42501) and "must be owner" become a message naming the fix. */
function asSchemaError(error: unknown, what: string): unknown {
  const code = (error as { code?: unknown }).code;
  if (code !== "42501") return error;
  return new CronwardenError(
    "SCHEMA_NOT_CURRENT",
    `${what}: ${(error as Error).message}. Schema changes need the migrator role and \`${MIGRATE_COMMAND}\`; the service role needs SELECT, INSERT, UPDATE and DELETE on ${SERVICE_TABLES.join(", ")} (see docs/operations.md)`,
    { cause: error },
  );
}

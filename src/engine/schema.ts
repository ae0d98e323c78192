import {
  getCreateIndexesSQL,
  getCreateLogsIndexesSQL,
  getCreateLogsTableSQL,
  getCreateTableSQL,
  getUpdateTimestampTriggerSQL,
} from "@agendajs/postgres-backend";
import type { Pool } from "pg";
import { createStoreTables } from "../store/schema.js";
import { JOBS_TABLE, LOGS_TABLE, SCHEMA_LOCK_KEY } from "./sql.js";
import { createTimelineIndexes } from "./timelineSql.js";

/**
 * Creates Agenda's tables (and cronwarden's own) once, under a PostgreSQL advisory lock. Left to Agenda
 * (`ensureSchema: true`), two instances starting together on an empty database race on
 * CREATE TABLE and one dies with an unhandled rejection (AGENDA-NOTES).
 */
export async function ensureAgendaSchema(pool: Pool): Promise<void> {
  const client = await pool.connect();
  try {
    await client.query("SELECT pg_advisory_lock($1)", [SCHEMA_LOCK_KEY]);
    try {
      await client.query(getCreateTableSQL(JOBS_TABLE));
      for (const statement of getCreateIndexesSQL(JOBS_TABLE)) await client.query(statement);
      await client.query(getUpdateTimestampTriggerSQL(JOBS_TABLE));
      await client.query(getCreateLogsTableSQL(LOGS_TABLE));
      for (const statement of getCreateLogsIndexesSQL(LOGS_TABLE)) await client.query(statement);
      await createStoreTables(client);
      await createTimelineIndexes(client);
    } finally {
      await client.query("SELECT pg_advisory_unlock($1)", [SCHEMA_LOCK_KEY]);
    }
  } finally {
    client.release();
  }
}

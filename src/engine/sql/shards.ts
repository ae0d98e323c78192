/**
 * The tables of sharded tasks (docs/sharding.md): one row per sharded slot (its shard count, its
 * reduce and its derived outcome) and one row per shard (its parameter or map item, its
 * assignment, its lease and its outcome). The statements that use them are src/sharding/shardSql.ts;
 * the tables are created here so that the schema's steps (src/engine/schema.ts) stay in one place.
 */

/** One row per sharded slot and round (an operator's re-run of a finished slot opens a new round). */
export const SHARD_SLOTS_TABLE = "cronwarden_shard_slots";
/** One row per shard of a sharded slot. */
export const SHARDS_TABLE = "cronwarden_shards";

export const CREATE_SHARD_TABLES = `
  CREATE TABLE IF NOT EXISTS "${SHARD_SLOTS_TABLE}" (
    task_name         TEXT NOT NULL,
    scheduled_at      TIMESTAMPTZ NOT NULL,
    round             INTEGER NOT NULL,
    shard_count       INTEGER NOT NULL,
    source            TEXT NOT NULL CHECK (source IN ('static', 'map')),
    trigger           TEXT NOT NULL,
    opened_at         TIMESTAMPTZ NOT NULL DEFAULT now(),
    opened_by         TEXT NOT NULL,
    coordinator       TEXT,
    reduce_state      TEXT NOT NULL DEFAULT 'none'
                      CHECK (reduce_state IN ('none', 'waiting', 'running', 'succeeded', 'failed')),
    reduce_holder     TEXT,
    reduce_runs       INTEGER NOT NULL DEFAULT 0,
    reduce_started_at TIMESTAMPTZ,
    reduce_ended_at   TIMESTAMPTZ,
    reduce_error      TEXT,
    outcome           TEXT CHECK (outcome IN ('succeeded', 'failed')),
    detail            TEXT,
    ended_at          TIMESTAMPTZ,
    PRIMARY KEY (task_name, scheduled_at, round)
  );
  CREATE TABLE IF NOT EXISTS "${SHARDS_TABLE}" (
    task_name    TEXT NOT NULL,
    scheduled_at TIMESTAMPTZ NOT NULL,
    round        INTEGER NOT NULL,
    shard_index  INTEGER NOT NULL,
    parameter    JSONB,
    assigned_to  TEXT,
    state        TEXT NOT NULL DEFAULT 'queued'
                 CHECK (state IN ('queued', 'running', 'succeeded', 'failed', 'skipped')),
    holder       TEXT,
    lease_until  TIMESTAMPTZ,
    runs         INTEGER NOT NULL DEFAULT 0,
    attempts     INTEGER NOT NULL DEFAULT 0,
    created_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    started_at   TIMESTAMPTZ,
    ended_at     TIMESTAMPTZ,
    duration_ms  INTEGER,
    result       JSONB,
    error        TEXT,
    PRIMARY KEY (task_name, scheduled_at, round, shard_index),
    FOREIGN KEY (task_name, scheduled_at, round)
      REFERENCES "${SHARD_SLOTS_TABLE}" (task_name, scheduled_at, round) ON DELETE CASCADE
  );
  CREATE INDEX IF NOT EXISTS "${SHARDS_TABLE}_open_idx"
    ON "${SHARDS_TABLE}" (task_name, scheduled_at, round, shard_index) WHERE state IN ('queued', 'running')`;

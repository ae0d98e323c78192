/**
 * The engine's own statements, one file per concern (src/engine/sql/): the tables and lock keys,
 * claiming and holding a lock, the fenced save of a run's start and end, the other ways a run ends, the job rows' reads and in-place changes,
 * the run log, the silent-stop check, and instance liveness. Agenda's repository does the rest.
 */

export * from "../db/transaction.js";
export * from "./sql/backfills.js";
export * from "./sql/claim.js";
export * from "./sql/dependencies.js";
export * from "./sql/instances.js";
export * from "./sql/jobs.js";
export * from "./sql/missedSlots.js";
export * from "./sql/pauseAll.js";
export * from "./sql/reruns.js";
export * from "./sql/runEnd.js";
export * from "./sql/runLog.js";
export * from "./sql/runLogPartitions.js";
export * from "./sql/runSearch.js";
export * from "./sql/runStarts.js";
export * from "./sql/save.js";
export * from "./sql/shards.js";
export * from "./sql/tables.js";

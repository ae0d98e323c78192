/**
 * Errors the framework raises on purpose. `code` is stable, for callers that branch on it;
 * `message` says where, what and how to fix.
 */
export type CronwardenErrorCode =
  | "DUPLICATE_TASK"
  | "INVALID_TASK_DEFINITION"
  | "INVALID_SETTINGS"
  | "INVALID_CONFIG"
  | "CONFIG_UNREADABLE"
  /** A parsed snapshot refused as a whole by the fleet guard. */
  | "CONFIG_REFUSED"
  | "DATABASE_UNAVAILABLE"
  | "EMBEDDED_POSTGRES_FAILED"
  | "SCHEDULER_STATE"
  /** start() was cut short by stop(); the scheduler is stopped (docs/operations.md, "Stopping"). */
  | "SCHEDULER_STOPPED"
  | "SCHEMA_NOT_CURRENT"
  /** The pool's connections go through a pooler in transaction or statement mode (src/engine/sessionPooling.ts). */
  | "POOLER_MODE_UNSUPPORTED"
  /** A sharded task's map items or a shard's returned value do not fit (docs/sharding.md, "Limits"). */
  | "SHARD_VALUE_INVALID";

export class CronwardenError extends Error {
  readonly code: CronwardenErrorCode;

  constructor(code: CronwardenErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "CronwardenError";
    this.code = code;
  }
}

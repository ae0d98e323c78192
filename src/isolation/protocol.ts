/**
 * The messages between a scheduler and the host script (src/isolation/host.mjs) that runs isolated
 * handlers in a worker thread or a child process. One run at a time per host; every message of a
 * run carries its id. Values are structured-cloned (worker_threads; fork with `serialization:
 * "advanced"`), so dates travel as dates.
 */

import type { Logger } from "../core/logger.js";

/**
 * What a module handler is given (the scheduler's TaskContext, src/scheduler/taskDefinition.ts,
 * is one): declared here, since isolation sits below the scheduler (docs/design.md, "Dependency
 * direction").
 */
export interface HandlerContext {
  readonly taskName: string;
  readonly scheduledAt: Date;
  readonly startedAt: Date;
  readonly attempt: number;
  readonly signal: AbortSignal;
  readonly runKey: string;
  readonly rerunOf: unknown;
  readonly logger: Logger;
  readonly instanceId: string;
  readonly upstreams: readonly unknown[];
  readonly trigger: "schedule" | "manual";
  readonly secrets: Readonly<Record<string, string>>;
}

/** The part of the context that crosses to the host; signal, logger and secrets are rebuilt there. */
export interface WireContext {
  taskName: string;
  scheduledAt: Date;
  startedAt: Date;
  attempt: number;
  runKey: string;
  trigger: "schedule" | "manual";
  instanceId: string;
  rerunOf: unknown;
  upstreams: unknown;
}

export type ToHost =
  | {
      type: "run";
      id: number;
      moduleUrl: string;
      exportName: string | undefined;
      context: WireContext;
      /** The task's secrets: `ctx.secrets`, and the host's whole `process.env` during the run. */
      secrets: Record<string, string>;
    }
  | { type: "abort"; id: number; reason: string };

export interface WireError {
  name: string;
  message: string;
  stack: string | undefined;
}

export type FromHost =
  /** The host has loaded and listens: it may be given a run. */
  | { type: "ready" }
  | { type: "log"; id: number | null; level: string; msg: string; data?: Record<string, unknown> }
  | { type: "done"; id: number; ok: true; value: unknown }
  | { type: "done"; id: number; ok: false; error: WireError };

/** A return value whose JSON is longer than this is not kept (the run still succeeds). */
export const MAX_RESULT_CHARS = 16 * 1024;

import type { UpstreamRun } from "../core/dependencies/spec.js";
import { isoTime } from "../core/isoTime.js";
import type { RunOutcome } from "../core/runTypes.js";
import { isTraceparent } from "../observability/tracing.js";
import { type RunTrigger, runTriggerOf } from "./engineApi.js";
import type { RunLogLine } from "./runJournal.js";

/**
 * The one layout of a run-log row's `meta` (agenda_logs.meta, JSONB): every writer encodes it with
 * `encodeRunMeta`, every reader in code decodes it with `decodeRunMeta`, and SQL that reads a field
 * inside a query takes its key from `RUN_META` (through `metaText`/`metaJson`/`metaHas`).
 *
 * A `start` row carries the run's identity (slot, instance, attempt, trigger, marks); a `retry` row
 * (a failed attempt followed by another) and an outcome row (`success`/`fail`: the slot's final
 * attempt, or a skipped slot) add the times, the outcome and the attempt's journal.
 */
export interface RunLogMeta {
  /** The slot the run is for. */
  scheduledAt?: Date;
  /** The instance that wrote the row (absent in rows from old versions: then `agenda_name`). */
  instanceId?: string;
  /** The attempt within the slot, from 1 (retries of the same slot count up). */
  attempt?: number;
  /** The run repeats one that died (its instance crashed or lost the lock). */
  rerun?: boolean;
  /** Absent: `schedule`. */
  trigger?: RunTrigger;
  /** Who asked for a manual run (a token's name). */
  requestedBy?: string;
  /** A downstream's run: the upstream runs it waited for (docs/dependencies.md). */
  upstreams?: UpstreamRun[];
  startedAt?: Date;
  finishedAt?: Date;
  outcome?: RunOutcome;
  /** Why the run was skipped or failed, in words. */
  detail?: string;
  /** The run a re-run repeats. */
  rerunOf?: { startedAt: Date; instanceId: string | null };
  /** The attempt's captured log lines (src/engine/runJournal.ts) and how many were left out. */
  logs?: RunLogLine[];
  logsDropped?: number;
  /** A failed attempt's error stack (redacted, bounded). */
  errorStack?: string;
  /** A downstream slot skipped by its dependency claim: why, and the upstream runs it saw. */
  dependency?: { reason: string; kind: string; upstreams: unknown };
  /** The W3C traceparent of the attempt's span, when traced (docs/tracing.md). */
  traceparent?: string;
  /**
   * A record whose run's handler started: it took the place of the run's start row
   * (src/engine/runRecorder.ts), so that a `fail` without it is a failure without a start.
   */
  started?: true;
}

type MetaKey = keyof RunLogMeta;

/** The JSON key of each field. SQL reads fields by these names. */
export const RUN_META = {
  scheduledAt: "scheduledAt",
  instanceId: "instanceId",
  attempt: "attempt",
  rerun: "rerun",
  trigger: "trigger",
  requestedBy: "requestedBy",
  upstreams: "upstreams",
  startedAt: "startedAt",
  finishedAt: "finishedAt",
  outcome: "outcome",
  detail: "detail",
  rerunOf: "rerunOf",
  logs: "logs",
  logsDropped: "logsDropped",
  errorStack: "errorStack",
  dependency: "dependency",
  traceparent: "traceparent",
  started: "started",
} as const satisfies { [K in MetaKey]-?: K };

const OUTCOMES: readonly RunOutcome[] = ["succeeded", "failed", "skipped", "interrupted", "lock-lost"];

/** One of the outcomes a run record may hold (a row's `meta.outcome`). */
export function isRunOutcome(value: unknown): value is RunOutcome {
  return OUTCOMES.includes(value as RunOutcome);
}

function column(alias: string | undefined): string {
  return alias ? `${alias}.meta` : "meta";
}

/** SQL for a field as text: `meta->>'scheduledAt'` (the timeline index is on exactly this expression). */
export function metaText(key: MetaKey, alias?: string): string {
  return `${column(alias)}->>'${RUN_META[key]}'`;
}

/** SQL for a field as JSON: `meta->'rerunOf'`. */
export function metaJson(key: MetaKey, alias?: string): string {
  return `${column(alias)}->'${RUN_META[key]}'`;
}

/** SQL: the row has the field (`meta ? 'outcome'`). */
export function metaHas(key: MetaKey, alias?: string): string {
  return `${column(alias)} ? '${RUN_META[key]}'`;
}

/**
 * The JSON written to `agenda_logs.meta`: times as ISO text, absent fields left out. Field by field
 * (every run's start and outcome rows pass here); the JSON key of each field is its name, as
 * RUN_META's type requires, and test/unit/runLogMeta.test.ts checks that every field is written.
 */
export function encodeRunMeta(meta: RunLogMeta): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  if (meta.scheduledAt !== undefined) out.scheduledAt = isoTime(meta.scheduledAt);
  if (meta.instanceId !== undefined) out.instanceId = meta.instanceId;
  if (meta.attempt !== undefined) out.attempt = meta.attempt;
  if (meta.rerun === true) out.rerun = true;
  if (meta.trigger !== undefined) out.trigger = meta.trigger;
  if (meta.requestedBy !== undefined) out.requestedBy = meta.requestedBy;
  if (meta.upstreams !== undefined) out.upstreams = meta.upstreams;
  if (meta.startedAt !== undefined) out.startedAt = isoTime(meta.startedAt);
  if (meta.finishedAt !== undefined) out.finishedAt = isoTime(meta.finishedAt);
  if (meta.outcome !== undefined) out.outcome = meta.outcome;
  if (meta.detail !== undefined) out.detail = meta.detail;
  if (meta.rerunOf !== undefined)
    out.rerunOf = { startedAt: isoTime(meta.rerunOf.startedAt), instanceId: meta.rerunOf.instanceId };
  if (meta.logs !== undefined) out.logs = meta.logs;
  if (meta.logsDropped !== undefined) out.logsDropped = meta.logsDropped;
  if (meta.errorStack !== undefined) out.errorStack = meta.errorStack;
  if (meta.dependency !== undefined) out.dependency = meta.dependency;
  if (meta.traceparent !== undefined) out.traceparent = meta.traceparent;
  if (meta.started === true) out.started = true;
  return out;
}

/**
 * Reads a row's `meta` as written by any version: fields of the wrong type or with unreadable
 * times are left out (never thrown on), so an old or hand-edited row still reads.
 */
export function decodeRunMeta(value: unknown): RunLogMeta {
  if (typeof value !== "object" || value === null || Array.isArray(value)) return {};
  const raw = value as Record<string, unknown>;
  const meta: RunLogMeta = {};
  const scheduledAt = dateOf(raw[RUN_META.scheduledAt]);
  if (scheduledAt) meta.scheduledAt = scheduledAt;
  const instanceId = textOf(raw[RUN_META.instanceId]);
  if (instanceId !== undefined) meta.instanceId = instanceId;
  const attempt = countOf(raw[RUN_META.attempt]);
  if (attempt !== undefined && attempt >= 1) meta.attempt = attempt;
  if (raw[RUN_META.rerun] === true || raw[RUN_META.rerun] === "true") meta.rerun = true;
  const trigger = raw[RUN_META.trigger];
  if (typeof trigger === "string" && runTriggerOf(trigger) === trigger) meta.trigger = trigger;
  const requestedBy = textOf(raw[RUN_META.requestedBy]);
  if (requestedBy !== undefined) meta.requestedBy = requestedBy;
  const upstreams = raw[RUN_META.upstreams];
  if (Array.isArray(upstreams)) meta.upstreams = upstreams.filter(isUpstreamRun);
  const startedAt = dateOf(raw[RUN_META.startedAt]);
  if (startedAt) meta.startedAt = startedAt;
  const finishedAt = dateOf(raw[RUN_META.finishedAt]);
  if (finishedAt) meta.finishedAt = finishedAt;
  const outcome = raw[RUN_META.outcome];
  if (OUTCOMES.includes(outcome as RunOutcome)) meta.outcome = outcome as RunOutcome;
  const detail = textOf(raw[RUN_META.detail]);
  if (detail !== undefined) meta.detail = detail;
  const rerunOf = raw[RUN_META.rerunOf];
  if (typeof rerunOf === "object" && rerunOf !== null) {
    const fields = rerunOf as Record<string, unknown>;
    const at = dateOf(fields.startedAt);
    if (at) meta.rerunOf = { startedAt: at, instanceId: textOf(fields.instanceId) ?? null };
  }
  const logs = raw[RUN_META.logs];
  if (Array.isArray(logs)) meta.logs = logs.filter(isLogLine);
  const logsDropped = countOf(raw[RUN_META.logsDropped]);
  if (logsDropped !== undefined && logsDropped > 0) meta.logsDropped = logsDropped;
  const errorStack = textOf(raw[RUN_META.errorStack]);
  if (errorStack !== undefined) meta.errorStack = errorStack;
  const dependency = raw[RUN_META.dependency];
  if (typeof dependency === "object" && dependency !== null) {
    const fields = dependency as Record<string, unknown>;
    meta.dependency = {
      reason: textOf(fields.reason) ?? "",
      kind: textOf(fields.kind) ?? "",
      upstreams: fields.upstreams ?? [],
    };
  }
  const traceparent = raw[RUN_META.traceparent];
  if (isTraceparent(traceparent)) meta.traceparent = traceparent;
  if (raw[RUN_META.started] === true) {
    meta.started = true;
    // attempt 1 of a started run is not stored (src/engine/sql/runLog.ts COMPACT_META)
    meta.attempt ??= 1;
  }
  return meta;
}

function textOf(value: unknown): string | undefined {
  return typeof value === "string" ? value : undefined;
}

function dateOf(value: unknown): Date | undefined {
  if (typeof value !== "string" && typeof value !== "number") return undefined;
  const date = new Date(value);
  return Number.isNaN(date.getTime()) ? undefined : date;
}

/** A whole number, also as text (SQL wrote some as text). */
function countOf(value: unknown): number | undefined {
  const number = typeof value === "string" && /^\d+$/.test(value) ? Number(value) : value;
  return typeof number === "number" && Number.isInteger(number) && number >= 0 ? number : undefined;
}

function isUpstreamRun(value: unknown): value is UpstreamRun {
  if (typeof value !== "object" || value === null) return false;
  const run = value as Record<string, unknown>;
  return (
    typeof run.name === "string" &&
    typeof run.runKey === "string" &&
    typeof run.outcome === "string" &&
    (run.traceparent === undefined || typeof run.traceparent === "string")
  );
}

function isLogLine(value: unknown): value is RunLogLine {
  if (typeof value !== "object" || value === null) return false;
  const line = value as Record<string, unknown>;
  return (
    typeof line.at === "string" &&
    typeof line.level === "string" &&
    typeof line.msg === "string" &&
    (line.data === undefined || typeof line.data === "string")
  );
}

/**
 * OpenTelemetry traces of runs (docs/tracing.md): one span per attempt. `@opentelemetry/api` is an
 * optional peer dependency: `loadRunTracer` imports it once, when the engine is prepared, and
 * without it every call below is a no-op. With it installed and no tracer provider registered, the
 * API's own no-op tracer answers (a span without a valid context: no traceparent is stored).
 *
 * The engine sees only this narrow interface: it never imports OpenTelemetry itself.
 */

/** One attempt of a run, as its span describes it. */
export interface TracedAttempt {
  task: string;
  /** The slot the run is for. */
  scheduledAt: Date;
  /** `task@slot`, the handler's `ctx.runKey`. */
  runKey: string;
  attempt: number;
  trigger: string;
  /** The traceparent of the run this one repeats (a re-run), when known. */
  rerunOfTraceparent?: string | undefined;
  /** A downstream's run: the upstream runs it waited for, with their traceparents when recorded. */
  upstreams?: readonly { runKey: string; traceparent?: string | undefined }[] | undefined;
}

/** The outcome an attempt's span ends with. */
export type TracedOutcome = "succeeded" | "failed" | "interrupted";

/** An attempt's span, as the engine holds it. */
export interface RunSpan {
  /** W3C `traceparent` of the span (`00-<trace>-<span>-<flags>`), or undefined when not traced. */
  readonly traceparent: string | undefined;
  /** Calls `fn` with the span's context active: the spans the handler starts nest under it. */
  within<T>(fn: () => T): T;
  /** Ends the span once with the outcome; a failure's message is redacted. */
  end(outcome: TracedOutcome, error?: Error): void;
}

/** What the engine calls at an attempt's start. */
export interface RunTracer {
  startAttempt(attempt: TracedAttempt): RunSpan;
}

/** The span of an attempt that is not traced. */
export const NO_SPAN: RunSpan = {
  traceparent: undefined,
  within: (fn) => fn(),
  end: () => {},
};

/** The tracer without OpenTelemetry: every span is NO_SPAN. */
export const NO_RUN_TRACING: RunTracer = { startAttempt: () => NO_SPAN };

/** The instrumentation scope's name (the tracer's name in every exported span). */
export const TRACER_NAME = "cronwarden";

/** Span attribute keys. */
export const RUN_SPAN_ATTRIBUTES = {
  task: "cronwarden.task",
  slot: "cronwarden.slot",
  runKey: "cronwarden.run_key",
  attempt: "cronwarden.attempt",
  trigger: "cronwarden.trigger",
  instanceId: "cronwarden.instance_id",
  outcome: "cronwarden.outcome",
} as const;

/**
 * The run tracer of this process: OpenTelemetry's when `@opentelemetry/api` can be imported, else
 * NO_RUN_TRACING. `load` is for tests (a failing import). The OpenTelemetry side lives in
 * ./otelTracer.ts, imported only here, so that no declaration of this module names a type of the
 * optional package.
 */
export async function loadRunTracer(
  instanceId: string,
  load: () => Promise<RunTracer> = async () => {
    const [api, { otelRunTracer }] = await Promise.all([
      import("@opentelemetry/api"),
      import("./otelTracer.js"),
    ]);
    return otelRunTracer(api, instanceId);
  },
): Promise<RunTracer> {
  try {
    return await load();
  } catch {
    return NO_RUN_TRACING;
  }
}

const TRACEPARENT = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/;

/** The parts of a stored traceparent; undefined for anything else (an old row, a hand edit, all zeros). */
export function traceparentParts(
  traceparent: string | undefined,
): { traceId: string; spanId: string; traceFlags: number } | undefined {
  const match = traceparent === undefined ? null : TRACEPARENT.exec(traceparent);
  if (!match) return undefined;
  const [, traceId, spanId, flags] = match as unknown as [string, string, string, string];
  if (/^0+$/.test(traceId) || /^0+$/.test(spanId)) return undefined;
  return { traceId, spanId, traceFlags: Number.parseInt(flags, 16) };
}

/** The W3C traceparent of a span context. */
export function traceparentOf(context: { traceId: string; spanId: string; traceFlags: number }): string {
  return `00-${context.traceId}-${context.spanId}-${(context.traceFlags & 0xff).toString(16).padStart(2, "0")}`;
}

/** Whether a text is a traceparent as stored (the run-log codec keeps only these). */
export function isTraceparent(value: unknown): value is string {
  return typeof value === "string" && traceparentParts(value) !== undefined;
}

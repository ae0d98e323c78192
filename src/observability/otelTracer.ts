import type * as OtelApi from "@opentelemetry/api";
import { redactError, redactSecrets } from "./redact.js";
import {
  NO_SPAN,
  RUN_SPAN_ATTRIBUTES,
  type RunSpan,
  type RunTracer,
  TRACER_NAME,
  type TracedAttempt,
  traceparentOf,
  traceparentParts,
} from "./tracing.js";

/**
 * The run tracer over the OpenTelemetry API (docs/tracing.md). Imported only by loadRunTracer
 * (./tracing.ts), once `@opentelemetry/api` was imported.
 */

type Api = typeof OtelApi;

/** The run tracer over an OpenTelemetry API (a tracer provider registered later is used at once: the API's tracer is a proxy). */
export function otelRunTracer(api: Api, instanceId: string): RunTracer {
  const tracer = api.trace.getTracer(TRACER_NAME);
  const redactedInstance = redactSecrets(instanceId);
  return {
    startAttempt(attempt) {
      const task = redactSecrets(attempt.task);
      const span = tracer.startSpan(`cronwarden.run ${task}`, {
        kind: api.SpanKind.CONSUMER,
        root: true,
        attributes: {
          [RUN_SPAN_ATTRIBUTES.task]: task,
          [RUN_SPAN_ATTRIBUTES.slot]: attempt.scheduledAt.toISOString(),
          [RUN_SPAN_ATTRIBUTES.runKey]: redactSecrets(attempt.runKey),
          [RUN_SPAN_ATTRIBUTES.attempt]: attempt.attempt,
          [RUN_SPAN_ATTRIBUTES.trigger]: attempt.trigger,
          [RUN_SPAN_ATTRIBUTES.instanceId]: redactedInstance,
        },
        links: linksOf(attempt),
      });
      return runSpan(api, span);
    },
  };
}

function runSpan(api: Api, span: OtelApi.Span): RunSpan {
  const spanContext = span.spanContext();
  const traceparent = api.isSpanContextValid(spanContext) ? traceparentOf(spanContext) : undefined;
  if (!span.isRecording() && traceparent === undefined) return NO_SPAN;
  const context = api.trace.setSpan(api.context.active(), span);
  let ended = false;
  return {
    traceparent,
    within: (fn) => api.context.with(context, fn),
    end(outcome, error) {
      if (ended) return;
      ended = true;
      span.setAttribute(RUN_SPAN_ATTRIBUTES.outcome, outcome);
      if (error && outcome !== "succeeded") {
        const redacted = redactError(error);
        span.recordException(redacted);
        span.setStatus({ code: api.SpanStatusCode.ERROR, message: redacted.message });
      }
      span.end();
    },
  };
}

/** The links of an attempt's span: to the run a re-run repeats, to a downstream's upstream runs. */
function linksOf(attempt: TracedAttempt): OtelApi.Link[] {
  const links: OtelApi.Link[] = [];
  const rerunOf = spanContextOf(attempt.rerunOfTraceparent);
  if (rerunOf) links.push({ context: rerunOf, attributes: { "cronwarden.link": "rerun_of" } });
  for (const upstream of attempt.upstreams ?? []) {
    const context = spanContextOf(upstream.traceparent);
    if (context)
      links.push({
        context,
        attributes: {
          "cronwarden.link": "upstream",
          [RUN_SPAN_ATTRIBUTES.runKey]: redactSecrets(upstream.runKey),
        },
      });
  }
  return links;
}

/** A span context from a stored traceparent; undefined for anything else. */
export function spanContextOf(traceparent: string | undefined): OtelApi.SpanContext | undefined {
  const parts = traceparentParts(traceparent);
  return parts ? { ...parts, isRemote: true } : undefined;
}

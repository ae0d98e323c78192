import * as api from "@opentelemetry/api";
import { describe, expect, it } from "vitest";
import { otelRunTracer, spanContextOf } from "../../src/observability/otelTracer.js";
import {
  isTraceparent,
  loadRunTracer,
  NO_RUN_TRACING,
  traceparentOf,
} from "../../src/observability/tracing.js";

/** The run tracer (src/observability/tracing.ts) without a tracer provider: no spans, nothing stored. */

const ATTEMPT = {
  task: "t",
  scheduledAt: new Date("2026-12-01T10:00:00Z"),
  runKey: "t@2026-12-01T10:00:00.000Z",
  attempt: 1,
  trigger: "schedule",
  upstreams: [
    {
      runKey: "u@2026-12-01T10:00:00.000Z",
      traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
    },
  ],
};

describe("loadRunTracer", () => {
  it("without @opentelemetry/api installed: the no-op tracer (no traceparent, the handler called as is)", async () => {
    const missing = Object.assign(new Error("Cannot find package '@opentelemetry/api'"), {
      code: "ERR_MODULE_NOT_FOUND",
    });
    const tracer = await loadRunTracer("i-1", () => Promise.reject(missing));
    expect(tracer).toBe(NO_RUN_TRACING);
    const span = tracer.startAttempt(ATTEMPT);
    expect(span.traceparent).toBeUndefined();
    expect(span.within(() => 42)).toBe(42);
    span.end("failed", new Error("x"));
  });

  it("with the API and no tracer provider registered: the API's no-op tracer, no traceparent", async () => {
    const tracer = await loadRunTracer("i-1");
    expect(tracer).not.toBe(NO_RUN_TRACING);
    const span = tracer.startAttempt(ATTEMPT);
    expect(span.traceparent).toBeUndefined();
    expect(span.within(() => api.trace.getActiveSpan())).toBeUndefined();
    span.end("succeeded");
  });

  it("a span with a valid context gives its traceparent; `within` calls the function and returns its value", async () => {
    // a tracer that hands out valid, non-recording spans: the context is set all the same
    const context = {
      traceId: "4bf92f3577b34da6a3ce929d0e0e4736",
      spanId: "00f067aa0ba902b7",
      traceFlags: 1,
    };
    const fake = {
      ...api,
      trace: {
        getTracer: () => ({ startSpan: () => api.trace.wrapSpanContext(context) }),
        setSpan: api.trace.setSpan.bind(api.trace),
      },
    } as unknown as typeof api;
    const span = otelRunTracer(fake, "i-1").startAttempt(ATTEMPT);
    expect(span.traceparent).toBe("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
    // without a context manager the API keeps no context: `within` still calls the function
    expect(await span.within(async () => 7)).toBe(7);
  });
});

describe("traceparents", () => {
  it("reads and writes W3C traceparents; rejects the invalid and the all-zero", () => {
    const text = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    const context = spanContextOf(text);
    expect(context).toEqual({
      traceId: "0af7651916cd43dd8448eb211c80319c",
      spanId: "b7ad6b7169203331",
      traceFlags: 1,
      isRemote: true,
    });
    expect(traceparentOf(context as api.SpanContext)).toBe(text);
    for (const bad of [
      undefined,
      "",
      "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
      "00-00000000000000000000000000000000-b7ad6b7169203331-01",
      "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
      "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01",
      "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01 x",
    ]) {
      expect(spanContextOf(bad), String(bad)).toBeUndefined();
      expect(isTraceparent(bad)).toBe(false);
    }
  });
});

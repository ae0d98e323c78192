import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { context, trace } from "@opentelemetry/api";
import { AsyncLocalStorageContextManager } from "@opentelemetry/context-async-hooks";
import { OTLPTraceExporter } from "@opentelemetry/exporter-trace-otlp-http";
import { BasicTracerProvider, SimpleSpanProcessor } from "@opentelemetry/sdk-trace-base";
import { afterAll, beforeAll, expect, it } from "vitest";
import { harnessSuite, pollUntil } from "../helpers/harness.js";

/**
 * Once end to end over OTLP/HTTP (docs/tracing.md): the SDK's OTLP exporter, pointed at a tiny
 * receiver in this test, sends the spans of a run with a downstream; the receiver reads the JSON
 * export requests and finds the spans of both tasks, the downstream's linked to the upstream's.
 */

interface OtlpSpan {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  attributes?: { key: string; value: { stringValue?: string; intValue?: string | number } }[];
  links?: { traceId: string; spanId: string }[];
}

interface Received {
  requests: number;
  bytes: number;
  contentTypes: Set<string>;
  spans: OtlpSpan[];
}

const received: Received = { requests: 0, bytes: 0, contentTypes: new Set(), spans: [] };
let server: Server;
let provider: BasicTracerProvider;

/** The OTLP/HTTP receiver: POST /v1/traces, JSON (the exporter's default encoding) or protobuf (counted only). */
function receiver(): Server {
  return createServer((request, response) => {
    const chunks: Buffer[] = [];
    request.on("data", (chunk: Buffer) => chunks.push(chunk));
    request.on("end", () => {
      const body = Buffer.concat(chunks);
      received.requests += 1;
      received.bytes += body.length;
      const type = String(request.headers["content-type"] ?? "");
      received.contentTypes.add(type);
      if (request.method === "POST" && request.url === "/v1/traces" && type.includes("json")) {
        const payload = JSON.parse(body.toString("utf8")) as {
          resourceSpans?: { scopeSpans?: { spans?: OtlpSpan[] }[] }[];
        };
        for (const resource of payload.resourceSpans ?? [])
          for (const scope of resource.scopeSpans ?? []) received.spans.push(...(scope.spans ?? []));
      }
      response.writeHead(200, { "content-type": "application/json" });
      response.end("{}");
    });
  });
}

const suite = harnessSuite();

beforeAll(async () => {
  server = receiver();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  const exporter = new OTLPTraceExporter({ url: `http://127.0.0.1:${port}/v1/traces` });
  provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  trace.setGlobalTracerProvider(provider);
});

afterAll(async () => {
  await provider.shutdown();
  trace.disable();
  context.disable();
  await new Promise((resolve) => server.close(resolve));
});

function attribute(span: OtlpSpan, key: string): string | undefined {
  return span.attributes?.find((item) => item.key === key)?.value.stringValue;
}

it("the spans of a run with a downstream reach an OTLP/HTTP receiver, the downstream's linked to the upstream's", async () => {
  const h = await suite.start(
    [
      { name: "otlp-a", handler: async () => {} },
      {
        name: "otlp-b",
        handler: async () => {
          trace.getTracer("test-handler").startSpan("otlp-b.work").end();
        },
      },
    ],
    [
      { name: "otlp-a", cron: "*/2 * * * * *" },
      { name: "otlp-b", after: ["otlp-a"] },
    ],
  );
  const downstream = await pollUntil("otlp-b's span at the receiver", () =>
    received.spans.find((span) => span.name === "cronwarden.run otlp-b"),
  );
  const slot = attribute(downstream, "cronwarden.slot");
  const upstream = received.spans.find(
    (span) => span.name === "cronwarden.run otlp-a" && attribute(span, "cronwarden.slot") === slot,
  );
  expect(upstream, `otlp-a's span for the slot ${slot}`).toBeDefined();
  expect(attribute(downstream, "cronwarden.run_key")).toBe(`otlp-b@${slot}`);
  expect(downstream.links?.map((link) => link.spanId)).toEqual([upstream?.spanId]);
  const work = await pollUntil("the handler's span at the receiver", () =>
    received.spans.find((span) => span.name === "otlp-b.work" && span.traceId === downstream.traceId),
  );
  expect(work.parentSpanId).toBe(downstream.spanId);
  expect(received.requests).toBeGreaterThanOrEqual(3);
  expect(received.bytes).toBeGreaterThan(0);
  expect([...received.contentTypes]).toEqual(["application/json"]);
  await h.stop();
});

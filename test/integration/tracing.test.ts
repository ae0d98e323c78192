import { context, type SpanContext, SpanStatusCode, trace } from "@opentelemetry/api";
import { AsyncLocalStorageContextManager } from "@opentelemetry/context-async-hooks";
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  type ReadableSpan,
  SimpleSpanProcessor,
} from "@opentelemetry/sdk-trace-base";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createAdminServer, type TaskRegistration } from "../../src/index.js";
import { registerSecret } from "../../src/observability/redact.js";
import { RUN_SPAN_ATTRIBUTES, traceparentOf } from "../../src/observability/tracing.js";
import { harnessSuite, pollUntil, type SchedulerHarness } from "../helpers/harness.js";

/**
 * OpenTelemetry traces of runs (docs/tracing.md) against a real PostgreSQL, with the SDK's
 * in-memory exporter registered globally: a span per attempt, a downstream's span linked to its
 * upstream's, the handler's own spans nested in its run's span, and the traceparent in the run
 * record and the run detail. Every wait is on the exporter's content or the database's record.
 */

const suite = harnessSuite();
const exporter = new InMemorySpanExporter();
const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
const contextManager = new AsyncLocalStorageContextManager();

beforeAll(() => {
  context.setGlobalContextManager(contextManager.enable());
  trace.setGlobalTracerProvider(provider);
});

afterAll(async () => {
  await provider.shutdown();
  trace.disable();
  context.disable();
});

const EVERY_2S = "*/2 * * * * *";
const NEVER_SOON = "0 0 1 1 *";

function runSpans(task: string): ReadableSpan[] {
  return exporter
    .getFinishedSpans()
    .filter(
      (span) => span.attributes[RUN_SPAN_ATTRIBUTES.task] === task && span.name.startsWith("cronwarden.run"),
    );
}

interface RecordRow {
  id: string;
  event: string;
  slot: string;
  traceparent: string | null;
}

async function records(task: string): Promise<RecordRow[]> {
  const result = await suite.db().pool.query<RecordRow>(
    `SELECT id::text AS id, event, meta->>'scheduledAt' AS slot, meta->>'traceparent' AS traceparent
         FROM agenda_logs WHERE job_name = $1 AND event IN ('start', 'success', 'fail') ORDER BY timestamp`,
    [task],
  );
  return result.rows;
}

describe("OpenTelemetry traces of runs", () => {
  it("a downstream's span links to its upstream's; the handler's span nests in its run's; the traceparent is recorded", async () => {
    const handlerTracer = trace.getTracer("test-handler");
    const h = await suite.start(
      [
        { name: "tr-a", handler: async () => {} },
        {
          name: "tr-b",
          handler: async () => {
            // across an await (a database round trip): the run's context is still the active one
            await suite.db().pool.query("SELECT 1");
            await handlerTracer.startActiveSpan("tr-b.work", async (span) => {
              await suite.db().pool.query("SELECT 1");
              span.end();
            });
          },
        },
      ],
      [
        { name: "tr-a", cron: EVERY_2S },
        { name: "tr-b", after: ["tr-a"] },
      ],
    );
    const downstream = await pollUntil("a span of tr-b", () => runSpans("tr-b")[0]);
    const slot = downstream.attributes[RUN_SPAN_ATTRIBUTES.slot] as string;
    const upstream = runSpans("tr-a").find((span) => span.attributes[RUN_SPAN_ATTRIBUTES.slot] === slot);
    if (!upstream) throw new Error(`no span of tr-a for the slot ${slot}`);

    // the spans: one per attempt, with the run's attributes and outcome
    expect(upstream.attributes).toMatchObject({
      [RUN_SPAN_ATTRIBUTES.runKey]: `tr-a@${slot}`,
      [RUN_SPAN_ATTRIBUTES.attempt]: 1,
      [RUN_SPAN_ATTRIBUTES.trigger]: "schedule",
      [RUN_SPAN_ATTRIBUTES.instanceId]: h.scheduler.settings.instanceId,
      [RUN_SPAN_ATTRIBUTES.outcome]: "succeeded",
    });
    expect(downstream.name).toBe("cronwarden.run tr-b");
    expect(downstream.attributes[RUN_SPAN_ATTRIBUTES.outcome]).toBe("succeeded");
    expect(downstream.status.code).not.toBe(SpanStatusCode.ERROR);

    // the link: the downstream's span to its upstream's run, read from the upstream's record
    expect(downstream.links.map((link) => link.context.spanId)).toEqual([upstream.spanContext().spanId]);
    expect(downstream.links[0]?.context.traceId).toBe(upstream.spanContext().traceId);
    expect(downstream.links[0]?.attributes).toMatchObject({ "cronwarden.link": "upstream" });

    // the handler's own span nests inside its run's span
    const work = exporter.getFinishedSpans().find((span) => span.name === "tr-b.work");
    expect(work?.parentSpanContext?.spanId).toBe(downstream.spanContext().spanId);
    expect(work?.spanContext().traceId).toBe(downstream.spanContext().traceId);

    // the traceparent in the run record (start and outcome rows) and the run detail
    const traceparent = traceparentOf(downstream.spanContext());
    const rows = await pollUntil("tr-b's outcome record", async () => {
      const found = (await records("tr-b")).filter((row) => row.slot === slot);
      return found.some((row) => row.event === "success") ? found : undefined;
    });
    expect(rows.map((row) => row.traceparent)).toEqual(rows.map(() => traceparent));
    const outcome = rows.find((row) => row.event === "success") as RecordRow;
    expect(await h.scheduler.runDetail(outcome.id)).toMatchObject({ traceparent, task: "tr-b" });
    // and the admin API's run detail (loopback: reads need no token)
    const admin = createAdminServer({ scheduler: h.scheduler, port: 0, logger: h.logs.logger });
    const { url } = await admin.listen();
    try {
      const response = await fetch(`${url}/runs/${outcome.id}`);
      expect(response.status).toBe(200);
      expect(await response.json()).toMatchObject({ id: outcome.id, traceparent });
    } finally {
      await admin.close();
    }
    const upstreamRecord = (await records("tr-a")).find(
      (row) => row.slot === slot && row.event === "success",
    );
    expect(upstreamRecord?.traceparent).toBe(traceparentOf(upstream.spanContext()));
    await h.stop();
  });

  it("across instances: the upstream ran on one, the downstream on the other, and the link holds", async () => {
    const instances = new Map<string, SchedulerHarness>();
    const tasks = (): TaskRegistration[] => [
      {
        name: "trx-a",
        // the upstream's instance stops taking runs as its run ends: the other one runs the downstream
        handler: async (ctx) => void instances.get(ctx.instanceId)?.scheduler.stop(),
      },
      { name: "trx-b", handler: async () => {} },
    ];
    const config = [
      { name: "trx-a", cron: NEVER_SOON },
      { name: "trx-b", after: ["trx-a"] },
    ];
    for (const instanceId of ["trx-1", "trx-2"])
      instances.set(instanceId, await suite.start(tasks(), config, { instanceId }));
    await instances.get("trx-1")?.scheduler.runNow("trx-a", { withDownstream: true });
    const downstream = await pollUntil("a span of trx-b", () => runSpans("trx-b")[0], { timeoutMs: 30_000 });
    const [upstream] = runSpans("trx-a");
    if (!upstream) throw new Error("no span of trx-a");
    const ranOn = (span: ReadableSpan) => span.attributes[RUN_SPAN_ATTRIBUTES.instanceId];
    expect(ranOn(downstream)).not.toBe(ranOn(upstream));
    expect([ranOn(upstream), ranOn(downstream)].sort()).toEqual(["trx-1", "trx-2"]);
    expect(downstream.attributes[RUN_SPAN_ATTRIBUTES.slot]).toBe(
      upstream.attributes[RUN_SPAN_ATTRIBUTES.slot],
    );
    expect(downstream.links.map((link) => link.context.spanId)).toEqual([upstream.spanContext().spanId]);
  }, 60_000);

  it("a re-run's span links to the run it repeats, by the traceparent of that run's start row", async () => {
    const h = await suite.start(
      [{ name: "tr-rerun", handler: async () => {} }],
      [{ name: "tr-rerun", cron: NEVER_SOON }],
      { lockLifetimeMs: 1000 },
    );
    // the dead run: it started slot `slot` on instance `dead` (its start row, traced), never ended
    const dead = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    const { rows } = await suite.db().pool.query<{ id: string; slot: Date }>(
      `UPDATE agenda_jobs
          SET next_run_at = now() + interval '1 hour',
              last_run_at = now() - interval '20 seconds', last_finished_at = now() - interval '30 seconds',
              locked_at = now() - interval '60 seconds', last_modified_by = 'dead',
              data = coalesce(data, '{}'::jsonb) || jsonb_build_object('run', jsonb_build_object(
                'slot', to_char((date_trunc('second', now()) - interval '21 seconds') AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
                'startedAt', now() - interval '20 seconds', 'instanceId', 'dead'))
        WHERE name = 'tr-rerun'
        RETURNING id::text AS id, date_trunc('second', now()) - interval '21 seconds' AS slot`,
    );
    const { id, slot } = rows[0] as { id: string; slot: Date };
    await suite.db().pool.query(
      `INSERT INTO agenda_logs (timestamp, level, event, job_id, job_name, message, agenda_name, meta)
       VALUES (now() - interval '20 seconds', 'info', 'start', $1, 'tr-rerun', 'job started', 'dead',
               jsonb_build_object('scheduledAt', $2::text, 'instanceId', 'dead', 'traceparent', $3::text))`,
      [id, slot.toISOString(), dead],
    );
    const span = await pollUntil("the re-run's span", () => runSpans("tr-rerun")[0], { timeoutMs: 20_000 });
    expect(span.attributes[RUN_SPAN_ATTRIBUTES.slot]).toBe(slot.toISOString());
    expect(span.links).toHaveLength(1);
    expect(traceparentOf(span.links[0]?.context as SpanContext)).toBe(dead);
    expect(span.links[0]?.attributes).toMatchObject({ "cronwarden.link": "rerun_of" });
    // a new trace: the re-run is not a child of the run that died
    expect(span.spanContext().traceId).not.toBe("4bf92f3577b34da6a3ce929d0e0e4736");
    await h.stop();
  }, 40_000);

  it("a failed attempt's span has the error status and a redacted message", async () => {
    const secret = "tr-secret-7f3a9c";
    registerSecret(secret);
    const h = await suite.start(
      [
        {
          name: "tr-fail",
          handler: async () => {
            throw new Error(`could not connect with ${secret}`);
          },
        },
      ],
      [{ name: "tr-fail", cron: NEVER_SOON }],
    );
    await h.scheduler.runNow("tr-fail");
    const span = await pollUntil("a span of tr-fail", () => runSpans("tr-fail")[0]);
    expect(span.attributes).toMatchObject({
      [RUN_SPAN_ATTRIBUTES.outcome]: "failed",
      [RUN_SPAN_ATTRIBUTES.trigger]: "manual",
    });
    expect(span.status.code).toBe(SpanStatusCode.ERROR);
    expect(span.status.message).toBe("could not connect with ***");
    const exported = JSON.stringify({
      status: span.status,
      events: span.events,
      attributes: span.attributes,
    });
    expect(exported).not.toContain(secret);
    expect(span.events.map((event) => event.name)).toEqual(["exception"]);
    const record = await pollUntil("tr-fail's record", async () =>
      (await records("tr-fail")).find((row) => row.event === "fail"),
    );
    expect(record.traceparent).toBe(traceparentOf(span.spanContext()));
    await h.stop();
  });
});

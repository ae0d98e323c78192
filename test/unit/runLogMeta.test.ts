import { describe, expect, it } from "vitest";
import {
  decodeRunMeta,
  encodeRunMeta,
  metaHas,
  metaJson,
  metaText,
  RUN_META,
  type RunLogMeta,
} from "../../src/engine/runLogMeta.js";

/** The run log's `meta` codec (src/engine/runLogMeta.ts), on literal rows as the database returns them. */

describe("encodeRunMeta", () => {
  it("writes times as ISO text and leaves absent fields (and a false rerun) out", () => {
    expect(
      encodeRunMeta({
        scheduledAt: new Date("2026-12-01T10:00:00Z"),
        instanceId: "i-1",
        attempt: 2,
        rerun: false,
        trigger: "manual",
        requestedBy: "ops",
        startedAt: new Date("2026-12-01T10:00:00.005Z"),
        finishedAt: new Date("2026-12-01T10:00:01.250Z"),
        outcome: "failed",
        detail: undefined,
        rerunOf: { startedAt: new Date("2026-12-01T09:59:59Z"), instanceId: null },
        logs: [{ at: "2026-12-01T10:00:00.100Z", level: "info", msg: "hello" }],
        logsDropped: 3,
        errorStack: "Error: boom\n    at x",
      }),
    ).toEqual({
      scheduledAt: "2026-12-01T10:00:00.000Z",
      instanceId: "i-1",
      attempt: 2,
      trigger: "manual",
      requestedBy: "ops",
      startedAt: "2026-12-01T10:00:00.005Z",
      finishedAt: "2026-12-01T10:00:01.250Z",
      outcome: "failed",
      rerunOf: { startedAt: "2026-12-01T09:59:59.000Z", instanceId: null },
      logs: [{ at: "2026-12-01T10:00:00.100Z", level: "info", msg: "hello" }],
      logsDropped: 3,
      errorStack: "Error: boom\n    at x",
    });
    expect(encodeRunMeta({ rerun: true })).toEqual({ rerun: true });
    expect(encodeRunMeta({})).toEqual({});
  });

  it("writes every field RUN_META lists (a field added to RunLogMeta must be added to the encoder)", () => {
    const every: Required<RunLogMeta> = {
      scheduledAt: new Date(0),
      instanceId: "i",
      attempt: 1,
      rerun: true,
      trigger: "manual",
      requestedBy: "ops",
      upstreams: [],
      startedAt: new Date(1),
      finishedAt: new Date(2),
      outcome: "succeeded",
      detail: "d",
      rerunOf: { startedAt: new Date(0), instanceId: null },
      logs: [],
      logsDropped: 0,
      errorStack: "s",
      dependency: { reason: "r", kind: "k", upstreams: [] },
      traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
      started: true,
    };
    expect(Object.keys(encodeRunMeta(every)).sort()).toEqual(Object.values(RUN_META).sort());
  });

  it("reads back what it wrote, through JSON", () => {
    const meta = {
      scheduledAt: new Date("2026-12-01T10:00:00Z"),
      instanceId: "i-2",
      attempt: 1,
      rerun: true,
      upstreams: [
        {
          name: "a",
          runKey: "a@2026-12-01T10:00:00.000Z",
          outcome: "succeeded",
          traceparent: "00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-01",
        },
      ],
      startedAt: new Date("2026-12-01T10:00:02Z"),
      finishedAt: new Date("2026-12-01T10:00:03Z"),
      outcome: "succeeded" as const,
      rerunOf: { startedAt: new Date("2026-12-01T10:00:00.010Z"), instanceId: "i-1" },
      dependency: { reason: "upstream a failed", kind: "upstream_failed", upstreams: [] },
      traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
    };
    expect(decodeRunMeta(JSON.parse(JSON.stringify(encodeRunMeta(meta))))).toEqual(meta);
  });
});

describe("decodeRunMeta", () => {
  it("reads rows of old versions and rows that are not objects as far as they go, never throwing", () => {
    for (const value of [null, undefined, "text", 42, [], true]) expect(decodeRunMeta(value)).toEqual({});
    // an outcome row before instanceId/attempt existed: the reader falls back to the row's columns
    expect(decodeRunMeta({ scheduledAt: "2026-01-01T00:00:00.000Z", outcome: "succeeded" })).toEqual({
      scheduledAt: new Date("2026-01-01T00:00:00.000Z"),
      outcome: "succeeded",
    });
  });

  it("leaves out fields of the wrong type, unreadable times and unknown outcomes", () => {
    expect(
      decodeRunMeta({
        scheduledAt: "not a time",
        instanceId: 7,
        attempt: -1,
        rerun: "yes",
        trigger: "cron",
        requestedBy: { name: "x" },
        upstreams: [{ name: "a" }, { name: "b", runKey: "b@x", outcome: "failed" }],
        startedAt: {},
        finishedAt: "2026-12-01T10:00:00+00:00",
        outcome: "exploded",
        detail: null,
        rerunOf: { instanceId: "i-1" },
        logs: [{ at: "t", level: "info", msg: "kept" }, "dropped", { msg: "no level" }],
        logsDropped: "2",
        errorStack: 12,
        unknownKey: "ignored",
      }),
    ).toEqual({
      upstreams: [{ name: "b", runKey: "b@x", outcome: "failed" }],
      finishedAt: new Date("2026-12-01T10:00:00Z"),
      logs: [{ at: "t", level: "info", msg: "kept" }],
      logsDropped: 2,
    });
  });

  it("takes PostgreSQL's jsonb time text (microseconds, +00:00) and a numeric attempt written as text", () => {
    expect(
      decodeRunMeta({ finishedAt: "2026-12-01T10:00:00.123456+00:00", attempt: "3", trigger: "schedule" }),
    ).toEqual({ finishedAt: new Date("2026-12-01T10:00:00.123Z"), attempt: 3, trigger: "schedule" });
  });
});

describe("SQL paths", () => {
  it("name the same keys the codec writes", () => {
    expect(metaText("scheduledAt")).toBe("meta->>'scheduledAt'");
    expect(metaText("outcome", "l")).toBe("l.meta->>'outcome'");
    expect(metaJson("rerunOf")).toBe("meta->'rerunOf'");
    expect(metaHas("outcome")).toBe("meta ? 'outcome'");
    const written = encodeRunMeta({ scheduledAt: new Date(0), outcome: "skipped", detail: "d" });
    expect(Object.keys(written)).toEqual([RUN_META.scheduledAt, RUN_META.outcome, RUN_META.detail]);
  });
});

import { describe, expect, it } from "vitest";
import { backoffDelay, retryDelay } from "../../src/core/backoff.js";
import { maskSecrets, redactUrl } from "../../src/observability/redact.js";
import { applyEvents, assembleDocument, type EtcdSnapshot } from "../../src/sources/etcdDocument.js";
import { applyNamespace } from "../../src/sources/namespace.js";
import { formatOfContentType, parseDocument } from "../../src/sources/parseDocument.js";

const snapshot = (entries: Record<string, string>, revision = 10n): EtcdSnapshot => ({
  entries: new Map(
    Object.entries(entries).map(([key, value], index) => [
      key,
      { value: Buffer.from(value), modRevision: BigInt(index + 1) },
    ]),
  ),
  revision,
});
const options = { source: "etcd http://e:2379 prefix /p/", maxBytes: 1_000 };

describe("source helpers", () => {
  it("retryDelay doubles from initialMs up to maxMs, within ±25%", () => {
    for (let attempt = 0; attempt < 200; attempt += 1) {
      const delays = [1, 2, 3, 4, 5, 9].map((failures) =>
        retryDelay(failures, { initialMs: 100, maxMs: 400 }),
      );
      const bases = [100, 200, 400, 400, 400, 400];
      delays.forEach((delay, index) => {
        expect(delay).toBeGreaterThanOrEqual((bases[index] ?? 0) * 0.75);
        expect(delay).toBeLessThanOrEqual((bases[index] ?? 0) * 1.25);
      });
    }
  });

  it("backoffDelay is the same doubling without jitter: the start-up wait for the database uses it as is", () => {
    const waits = [1, 2, 3, 4, 5, 6, 7, 40].map((attempt) =>
      backoffDelay(attempt, { initialMs: 500, maxMs: 15_000 }),
    );
    expect(waits).toEqual([500, 1_000, 2_000, 4_000, 8_000, 15_000, 15_000, 15_000]);
  });

  it("applyNamespace fills the placeholder and refuses a namespace without one, or the reverse", () => {
    expect(applyNamespace("/cw/{namespace}/tasks", "prod", "key")).toBe("/cw/prod/tasks");
    expect(applyNamespace("/cw/tasks", undefined, "key")).toBe("/cw/tasks");
    expect(() => applyNamespace("/cw/{namespace}", undefined, "key")).toThrow("key contains {namespace}");
    expect(() => applyNamespace("/cw/", "prod", "prefix")).toThrow("prefix has no {namespace} placeholder");
    expect(() => applyNamespace("/{namespace}", "a/b", "key")).toThrow('namespace "a/b" is invalid');
  });

  it("masks secrets and their fragments, and secret-looking query parameters", () => {
    const secret = "0123456789abcdef";
    expect(maskSecrets(`got ${secret} and "...89abcdef" and 0123456`, [secret])).toBe(
      'got *** and "...***" and 0123456',
    );
    expect(redactUrl("https://h/x?token=abc&ns=prod&api_key=k#f")).toBe(
      "https://h/x?token=***&ns=prod&api_key=***#f",
    );
  });

  it("tells JSON from YAML by Content-Type, and names the format that failed", () => {
    expect(formatOfContentType("application/json; charset=utf-8")).toBe("json");
    expect(formatOfContentType("application/vnd.cw+json")).toBe("json");
    expect(formatOfContentType("text/yaml")).toBe("yaml");
    expect(formatOfContentType("application/x-yaml")).toBe("yaml");
    expect(formatOfContentType("text/plain")).toBeUndefined();
    expect(formatOfContentType(null)).toBeUndefined();
    expect(() => parseDocument("{", ["json"])).toThrow(/^not valid JSON: /);
    expect(parseDocument("a: 1", ["json", "yaml"])).toEqual({ a: 1 });
  });

  it("assembles a prefix into tasks in key byte order, names from the keys", () => {
    const document = assembleDocument(
      snapshot({
        "/p/b": "enabled: true\ncron: '* * * * *'",
        "/p/a": '{"name":"a","enabled":false,"cron":"1 * * * *"}',
      }),
      { prefix: "/p/" },
      options,
    );
    expect(document).toEqual({
      content: {
        tasks: [
          { name: "a", enabled: false, cron: "1 * * * *" },
          { name: "b", enabled: true, cron: "* * * * *" },
        ],
      },
      revision: "10",
    });
  });

  it("refuses an empty prefix, a mismatched name, a non-mapping, an empty value and too many bytes", () => {
    const assemble = (entries: Record<string, string>, maxBytes = 1_000) =>
      assembleDocument(snapshot(entries), { prefix: "/p/" }, { ...options, maxBytes });
    expect(() => assemble({})).toThrow("no keys under prefix /p/ (at revision 10)");
    expect(() => assemble({ "/p/a": "name: b\nenabled: true\ncron: x" })).toThrow(
      'value of key /p/a names task "b" but the key names "a"',
    );
    expect(() => assemble({ "/p/a": "- 1" })).toThrow("value of key /p/a is not a mapping");
    expect(() => assemble({ "/p/a": "null" })).toThrow("got null");
    expect(() => assemble({ "/p/a": " " })).toThrow("key /p/a is empty");
    expect(() => assemble({ "/p/a": "x".repeat(600), "/p/b": "y".repeat(600) })).toThrow(
      "values of the keys under prefix /p/ total 1200 bytes, over the limit of 1000 (maxBytes)",
    );
  });

  it("applies put and delete events; a key's document has the key's mod revision", () => {
    const state = snapshot({ "/k": '{"tasks":[]}' }, 5n);
    applyEvents(state, [
      { type: "Put", kv: { key: Buffer.from("/k"), value: Buffer.from("tasks: [1]"), mod_revision: "7" } },
    ] as never);
    expect(assembleDocument(state, { key: "/k" }, options)).toEqual({
      content: { tasks: [1] },
      revision: "7",
    });
    applyEvents(state, [
      { type: "Delete", kv: { key: Buffer.from("/k"), value: Buffer.alloc(0), mod_revision: "9" } },
    ] as never);
    expect(state.revision).toBe(9n);
    expect(() => assembleDocument(state, { key: "/k" }, options)).toThrow(
      "key /k does not exist (at revision 9)",
    );
  });
});

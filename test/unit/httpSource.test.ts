import { randomBytes } from "node:crypto";
import { createServer, type IncomingHttpHeaders, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from "vitest";
import type { ConfigDocument } from "../../src/sources/configSource.js";
import { HttpConfigSource, type HttpSourceOptions } from "../../src/sources/httpSource.js";
import { pollUntil } from "../helpers/poll.js";

/**
 * A local server the test scripts: `respond` answers each request of the current test; every one is
 * recorded. Sources made by `source()` send the test's number, so that a request a previous test's
 * source had sent just before it stopped is not counted here.
 */
interface Seen {
  url: string;
  headers: IncomingHttpHeaders;
  at: number;
}
let requests: Seen[] = [];
let respond: (response: ServerResponse, seen: Seen) => void;
let base: string;
let testNumber = 0;
const server = createServer((request, response) => {
  const from = request.headers["x-test"];
  if (from !== undefined && from !== String(testNumber)) return void response.writeHead(503).end();
  const seen = { url: request.url ?? "", headers: request.headers, at: performance.now() };
  requests.push(seen);
  unanswered.add(response);
  response.on("close", () => unanswered.delete(response));
  respond(response, seen);
});
/** Responses a test left hanging: ended after each test (idle connections stay, the client may reuse them). */
const unanswered = new Set<ServerResponse>();

beforeAll(async () => {
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(async () => {
  server.closeAllConnections();
  await new Promise((resolve) => server.close(resolve));
});

let unsubscribe: (() => Promise<void>) | undefined;
beforeEach(() => {
  testNumber += 1;
  requests = [];
});
afterEach(async () => {
  await unsubscribe?.();
  unsubscribe = undefined;
  for (const response of unanswered) response.destroy();
});

const tasksJson = (cron: string) => JSON.stringify({ tasks: [{ name: "a", enabled: true, cron }] });
const tasksYaml = (cron: string) => `tasks:\n  - name: a\n    enabled: true\n    cron: "${cron}"\n`;
const parsed = (cron: string) => JSON.parse(tasksJson(cron));

function send(body: string | Buffer, headers: Record<string, string> = {}, status = 200) {
  return (response: ServerResponse) => {
    response.writeHead(
      status,
      status === 304 || status === 204 ? headers : { "content-length": Buffer.byteLength(body), ...headers },
    );
    response.end(body);
  };
}

function source(options: Partial<HttpSourceOptions> = {}) {
  return new HttpConfigSource({
    url: `${base}/tasks`,
    pollIntervalMs: 40,
    timeoutMs: 2_000,
    ...options,
    headers: { "x-test": String(testNumber), ...options.headers },
  });
}

function listen(http: HttpConfigSource) {
  const documents: ConfigDocument[] = [];
  const errors: Error[] = [];
  unsubscribe = http.subscribe({
    next: (document) => documents.push(document),
    error: (error) => errors.push(error),
  });
  return { documents, errors };
}

describe("HttpConfigSource", () => {
  it("parses JSON and YAML by Content-Type, by the format option, or by trying JSON then YAML", async () => {
    respond = send(tasksJson("1 * * * *"), { "content-type": "application/json; charset=utf-8" });
    const json = await source().load();
    expect(json.content).toEqual(parsed("1 * * * *"));
    expect(json.revision).toMatch(/^[0-9a-f]{16}$/);

    respond = send(tasksYaml("1 * * * *"), { "content-type": "application/yaml" });
    expect((await source().load()).content).toEqual(parsed("1 * * * *"));
    respond = send(tasksYaml("2 * * * *"), { "content-type": "text/plain" });
    expect((await source().load()).content).toEqual(parsed("2 * * * *"));
    expect((await source({ format: "yaml" }).load()).content).toEqual(parsed("2 * * * *"));

    respond = send(tasksYaml("3 * * * *"), { "content-type": "application/json" });
    await expect(source().load()).rejects.toThrow(
      `config http ${base}/tasks: body cannot be parsed (not valid JSON: `,
    );
    respond = send("tasks: [unclosed\n", {});
    await expect(source().load()).rejects.toThrow(/not valid YAML: .*line \d+, column \d+/s);
    await expect(source().load()).rejects.toMatchObject({ code: "INVALID_CONFIG" });
    expect(requests[0]?.headers.accept).toContain("application/json");
  });

  it("sends If-None-Match with the ETag and delivers nothing on 304; the ETag is the revision", async () => {
    let version = { etag: '"v1"', body: tasksJson("1 * * * *") };
    respond = (response, seen) => {
      if (seen.headers["if-none-match"] === version.etag) return send("", {}, 304)(response);
      send(version.body, { etag: version.etag, "content-type": "application/json" })(response);
    };
    const http = source();
    const loaded = await http.load();
    expect(loaded.revision).toBe('"v1"');
    const { documents, errors } = listen(http);
    await pollUntil("three conditional polls", () => requests.length >= 4);
    expect(requests.slice(1).map((seen) => seen.headers["if-none-match"])).toEqual(
      requests.slice(1).map(() => '"v1"'),
    );
    expect(documents).toEqual([]);

    version = { etag: '"v2"', body: tasksJson("2 * * * *") };
    await pollUntil("the new version", () => documents.length === 1);
    const seenBefore = requests.length;
    await pollUntil("more polls", () => requests.length >= seenBefore + 3);
    expect(documents).toEqual([{ content: parsed("2 * * * *"), revision: '"v2"' }]);
    expect(requests.at(-1)?.headers["if-none-match"]).toBe('"v2"');
    expect(errors).toEqual([]);
  });

  it("sends If-Modified-Since with Last-Modified, and a subscription without load() delivers once", async () => {
    let version = { modified: "Wed, 21 Oct 2026 07:28:00 GMT", body: tasksYaml("1 * * * *") };
    respond = (response, seen) => {
      if (seen.headers["if-modified-since"] === version.modified) return send("", {}, 304)(response);
      send(version.body, { "last-modified": version.modified })(response);
    };
    const { documents, errors } = listen(source());
    await pollUntil("conditional polls", () => requests.length >= 4);
    expect(requests[0]?.headers["if-modified-since"]).toBeUndefined();
    expect(requests[1]?.headers["if-modified-since"]).toBe(version.modified);
    expect(documents).toHaveLength(1);
    expect(documents[0]?.content).toEqual(parsed("1 * * * *"));

    version = { modified: "Wed, 21 Oct 2026 08:00:00 GMT", body: tasksYaml("2 * * * *") };
    await pollUntil("the new version", () => documents.length === 2);
    expect(documents[1]?.content).toEqual(parsed("2 * * * *"));
    expect(documents[1]?.revision).not.toBe(documents[0]?.revision);
    expect(errors).toEqual([]);
  });

  it("does not deliver an unchanged body again when the server ignores conditional requests", async () => {
    respond = send(tasksJson("1 * * * *"));
    const { documents } = listen(source());
    await pollUntil("several polls", () => requests.length >= 4);
    expect(documents).toHaveLength(1);
  });

  it("reports each failed poll, backs off exponentially, and returns to the interval after a success", async () => {
    const failingRequests = new Set([1, 2, 3, 4, 7]); // 1-based
    respond = (response) =>
      failingRequests.has(requests.length)
        ? send("upstream down", {}, 500)(response)
        : send(tasksJson("1 * * * *"), { "content-type": "application/json" })(response);
    const interval = 400;
    const { documents, errors } = listen(source({ pollIntervalMs: interval }));
    await pollUntil("the poll after the second outage", () => requests.length >= 8, { timeoutMs: 30_000 });

    expect(documents).toHaveLength(1);
    expect(errors).toHaveLength(5);
    expect(errors[0]?.message).toMatch(
      new RegExp(
        `^config http ${base}/tasks: answered HTTP 500 Internal Server Error; next attempt in \\d+ ms$`,
      ),
    );
    expect(errors[0]).toMatchObject({ code: "CONFIG_UNREADABLE" });
    const announced = errors.map((error) => Number(/next attempt in (\d+) ms$/.exec(error.message)?.[1]));
    // after failures 1..4: interval/4 doubling (100, 200, 400, 800 ms), each ±25%; after a success it starts over
    [100, 200, 400, 800, 100].forEach((base, index) => {
      expect(announced[index]).toBeGreaterThanOrEqual(base * 0.75);
      expect(announced[index]).toBeLessThanOrEqual(base * 1.25);
    });
    const gaps = requests.slice(1).map((seen, index) => seen.at - (requests[index]?.at ?? 0));
    for (const [index, delay] of announced.slice(0, 4).entries())
      expect(gaps[index]).toBeGreaterThanOrEqual(delay - 2);
    // after the successes (requests 5 and 6): the normal interval
    expect(gaps[4]).toBeGreaterThanOrEqual(interval - 2);
    expect(gaps[5]).toBeGreaterThanOrEqual(interval - 2);
  });

  it("names the URL and the reason when the server is unreachable", async () => {
    const closed = createServer();
    await new Promise<void>((resolve) => closed.listen(0, "127.0.0.1", resolve));
    const port = (closed.address() as AddressInfo).port;
    await new Promise((resolve) => closed.close(resolve));
    const http = new HttpConfigSource({ url: `http://127.0.0.1:${port}/tasks.json` });
    await expect(http.load()).rejects.toThrow(
      `config http http://127.0.0.1:${port}/tasks.json: request failed (connect ECONNREFUSED 127.0.0.1:${port})`,
    );
  });

  it("times out a server that does not answer, or stops sending the body", async () => {
    respond = () => undefined; // never answers
    await expect(source({ timeoutMs: 150 }).load()).rejects.toThrow(
      `config http ${base}/tasks: timed out after 150 ms`,
    );
    respond = (response) => {
      response.writeHead(200, { "content-type": "application/json" });
      response.write('{"tasks": ['); // and nothing more
    };
    await expect(source({ timeoutMs: 150 }).load()).rejects.toThrow(/timed out after 150 ms/);

    respond = () => undefined;
    const { errors } = listen(source({ timeoutMs: 100, pollIntervalMs: 200 }));
    await pollUntil("a reported timeout", () => errors.length >= 1);
    expect(errors[0]?.message).toMatch(/timed out after 100 ms; next attempt in \d+ ms$/);
  });

  it("refuses a body over maxBytes, by Content-Length or while reading, and stops reading it", async () => {
    respond = send("x".repeat(5_000), { "content-type": "application/json" });
    await expect(source({ maxBytes: 1_000 }).load()).rejects.toThrow(
      `config http ${base}/tasks: body is 5000 bytes (Content-Length), over the limit of 1000 bytes (maxBytes)`,
    );

    let closedEarly = false;
    respond = (response) => {
      response.writeHead(200, { "content-type": "application/json" }); // chunked: no Content-Length
      const chunk = Buffer.alloc(512, " ");
      const timer = setInterval(() => response.write(chunk), 5);
      response.on("close", () => {
        clearInterval(timer);
        closedEarly = !response.writableEnded;
      });
    };
    await expect(source({ maxBytes: 2_000 }).load()).rejects.toThrow(
      "body was not read further: it passed the limit of 2000 bytes (maxBytes)",
    );
    await pollUntil("the server to see the connection closed", () => closedEarly);
  });

  it("refuses an empty or blank body, any status but 200 and 304, and redirects", async () => {
    for (const body of ["", " \n\t\n"]) {
      respond = send(body, { "content-type": "application/json" });
      const error = await source()
        .load()
        .catch((thrown: Error) => thrown);
      expect(error).toMatchObject({ code: "CONFIG_UNREADABLE" });
      expect((error as Error).message).toContain(`config http ${base}/tasks: empty body`);
    }
    respond = send("", {}, 204);
    await expect(source().load()).rejects.toThrow("answered HTTP 204 No Content");
    respond = send("", {}, 304);
    await expect(source().load()).rejects.toThrow("answered HTTP 304 Not Modified");
    respond = send("", { location: "http://elsewhere.invalid/tasks" }, 302);
    await expect(source().load()).rejects.toThrow(
      "request failed (unexpected redirect); redirects are not followed: point url at the final location",
    );
    respond = send("nope", {}, 404);
    await expect(source().load()).rejects.toThrow("answered HTTP 404 Not Found");
  });

  it("takes the auth header from an environment variable and never shows its value", async () => {
    const token = randomBytes(16).toString("hex");
    const secret = `Bearer ${token}`;
    const env = "CRONWARDEN_TEST_HTTP_TOKEN";
    process.env[env] = secret;
    try {
      const http = source({ authHeaderFromEnv: { header: "Authorization", env }, timeoutMs: 150 });
      const messages: string[] = [];
      const failure = async (answer: typeof respond) => {
        respond = answer;
        messages.push(((await http.load().catch((error: Error) => error)) as Error).message);
      };
      await failure((response, seen) => send(`echo: ${seen.headers.authorization}`, {}, 500)(response));
      await failure((response, seen) => send(`tasks: [${seen.headers.authorization}\n`)(response));
      await failure((response, seen) => send(`{"tasks": "${seen.headers.authorization}`)(response));
      await failure(() => undefined);
      await failure(send(""));
      expect(requests.map((seen) => seen.headers.authorization)).toEqual(requests.map(() => secret));
      expect(messages).toHaveLength(5);
      for (const message of messages) {
        expect(message).toContain(`config http ${base}/tasks`);
        for (let start = 0; start + 8 <= token.length; start += 1) {
          expect(message).not.toContain(token.slice(start, start + 8));
        }
      }

      process.env[env] = "bad\nvalue-with-secret";
      await expect(http.load()).rejects.toThrow(
        `environment variable ${env} does not hold a valid value for the Authorization header`,
      );
      delete process.env[env];
      await expect(http.load()).rejects.toThrow(
        `environment variable ${env} (for the Authorization header) is not set or empty`,
      );
    } finally {
      delete process.env[env];
    }
  });

  it("fills {namespace} in the URL and masks secret query parameters in its description", async () => {
    respond = send(tasksJson("1 * * * *"));
    const http = new HttpConfigSource({
      url: `${base}/config/{namespace}/tasks.json?access_token=s3cr3t&v=2`,
      namespace: "staging",
    });
    await http.load();
    expect(requests[0]?.url).toBe("/config/staging/tasks.json?access_token=s3cr3t&v=2");
    expect(http.description).toBe(`http ${base}/config/staging/tasks.json?access_token=***&v=2`);
    expect(() => new HttpConfigSource({ url: `${base}/{namespace}.json` })).toThrow(
      "url contains {namespace} but no namespace was given",
    );
    expect(() => new HttpConfigSource({ url: `${base}/tasks.json`, namespace: "prod" })).toThrow(
      'namespace "prod" was given but url has no {namespace} placeholder',
    );
    expect(() => new HttpConfigSource({ url: `${base}/{namespace}`, namespace: "../prod" })).toThrow(
      'namespace "../prod" is invalid',
    );
    expect(() => new HttpConfigSource({ url: "http://user:pw@127.0.0.1/x" })).toThrow(
      "url must not contain credentials",
    );
  });

  it("stops polling on unsubscribe, even with a request in flight; unsubscribing twice is harmless", async () => {
    respond = send(tasksJson("1 * * * *"), { etag: '"v1"' });
    const http = source({ pollIntervalMs: 20 });
    const { errors } = listen(http);
    await pollUntil("a few polls", () => requests.length >= 3);
    respond = () => undefined; // the next request hangs
    const hanging = requests.length + 1;
    await pollUntil("a request in flight", () => requests.length >= hanging);
    const stop = unsubscribe;
    unsubscribe = undefined;
    const started = performance.now();
    await stop?.();
    expect(performance.now() - started).toBeLessThan(1_000);
    await stop?.();
    const seen = requests.length;
    await new Promise((resolve) => setTimeout(resolve, 200)); // 10 intervals: proves the absence of polls
    expect(requests).toHaveLength(seen);
    expect(errors).toEqual([]);
  });
});

import { describe, expect, it } from "vitest";
import { isLoopback } from "../../src/admin/index.js";
import { redactSecrets } from "../../src/observability/redact.js";

describe("isLoopback", () => {
  it("accepts 127.0.0.0/8, ::1 and localhost only", () => {
    for (const host of ["127.0.0.1", "127.1.2.3", "::1", "[::1]", "localhost", "LOCALHOST"]) {
      expect(isLoopback(host), host).toBe(true);
    }
    for (const host of [
      "0.0.0.0",
      "::",
      "10.0.0.1",
      "192.168.1.2",
      "example.com",
      "127.0.0.1.nip.io",
      "::ffff:10.0.0.1",
    ]) {
      expect(isLoopback(host), host).toBe(false);
    }
  });
});

describe("redactSecrets", () => {
  it("hides URL passwords, password pairs (keeping JSON valid) and known secrets", () => {
    expect(redactSecrets("cannot reach postgres://app:s3cr%40t@db:5432/app now")).toBe(
      "cannot reach postgres://app:***@db:5432/app now",
    );
    expect(redactSecrets("host=db password=hunter2 user=app")).toBe("host=db password=*** user=app");
    expect(JSON.parse(redactSecrets('{"password":"hunter2","user":"app"}'))).toEqual({
      password: "***",
      user: "app",
    });
    expect(redactSecrets("token abc123abc123abc123 echoed", ["abc123abc123abc123"])).toBe("token *** echoed");
    expect(redactSecrets("https://hooks.example.com/services/T/B/X and user@example.com")).toBe(
      "https://hooks.example.com/services/T/B/X and user@example.com",
    );
  });
});

describe("the redacting logger", () => {
  it("masks registered secrets and URL passwords in the message, fields, errors and their stacks", async () => {
    const { registerSecret } = await import("../../src/observability/redact.js");
    const { LogCapture } = await import("../helpers/logs.js");
    registerSecret("tok-0123456789abcdef");
    const logs = new LogCapture();
    const error = new Error("connect to postgres://app:pw-hunter22@db/app failed with tok-0123456789abcdef");
    logs.logger.error(
      {
        err: error,
        url: "postgres://app:pw-hunter22@db/app",
        nested: { note: "tok-0123456789abcdef" },
        password: "plain",
      },
      `run failed: ${error.message}`,
    );
    const text = JSON.stringify(logs.lines);
    expect(text).not.toContain("pw-hunter22");
    expect(text).not.toContain("tok-0123456789abcdef");
    expect(text).not.toContain('"plain"');
    expect(logs.lines[0]).toMatchObject({
      msg: "run failed: connect to postgres://app:***@db/app failed with ***",
      url: "postgres://app:***@db/app",
      nested: { note: "***" },
      password: "***",
      err: { type: "Error", message: "connect to postgres://app:***@db/app failed with ***" },
    });
    expect(String((logs.lines[0]?.err as { stack?: string } | undefined)?.stack)).toMatch(
      /^Error: connect to postgres:\/\/app:\*\*\*@db/,
    );
    // the original error is left as it was: the redaction works on copies
    expect(error.message).toContain("pw-hunter22");
  });

  it("masks secret-named keys two levels below the line, in errors, bindings and interpolated objects, and no deeper", async () => {
    const { LogCapture } = await import("../helpers/logs.js");
    const { redactingChild } = await import("../../src/core/logger.js");
    const logs = new LogCapture();
    const error = Object.assign(new Error("boom"), { token: "err-token-value", detail: { password: "pw2" } });
    logs.logger.child({ component: "x", token: "binding-token" }).info(
      {
        task: "t",
        source: { token: "one-level", headers: { authorization: "two-levels" } },
        list: [{ password: "in-an-array" }],
        deep: { a: { b: { password: "three-levels" } } },
        err: error,
        missing: { password: undefined },
      },
      "with %j",
      { webhookUrl: "interpolated-url" },
    );
    redactingChild(logs.logger, { config: { databaseUrl: "child-binding-url" } }).info("child line");
    const text = JSON.stringify(logs.lines);
    for (const secret of [
      "one-level",
      "two-levels",
      "in-an-array",
      "err-token-value",
      "pw2",
      "binding-token",
      "interpolated-url",
      "child-binding-url",
    ])
      expect(text).not.toContain(secret);
    expect(logs.lines[0]).toMatchObject({
      task: "t",
      token: "***",
      source: { token: "***", headers: { authorization: "***" } },
      list: [{ password: "***" }],
      // pino's own paths stopped at two levels below the line: so does the formatter
      deep: { a: { b: { password: "three-levels" } } },
      err: { message: "boom", token: "***", detail: { password: "***" } },
      missing: {},
    });
    expect(logs.lines[1]).toMatchObject({ config: { databaseUrl: "***" }, msg: "child line" });
  });
});

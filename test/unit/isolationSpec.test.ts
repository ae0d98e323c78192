import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { parseIsolation, parseSecretNames } from "../../src/isolation/isolationSpec.js";
import { readSecrets, SECRETS_DIR_VARIABLE } from "../../src/isolation/secretSource.js";
import { redactSecrets } from "../../src/observability/redact.js";
import { TaskRegistry } from "../../src/scheduler/taskRegistry.js";

const echo = new URL("../fixtures/isolation/echo.mjs", import.meta.url);
const where = 'task "t"';

describe("parseIsolation", () => {
  it("takes a module as a URL, a file URL string or an absolute path, with the defaults", () => {
    const expected = { mode: "worker", moduleUrl: echo.href, exportName: undefined, memoryLimitMb: 256 };
    expect(parseIsolation({ isolation: "worker", module: echo, hasHandler: false }, where)).toEqual(expected);
    expect(parseIsolation({ isolation: "worker", module: echo.href, hasHandler: false }, where)).toEqual(
      expected,
    );
    expect(
      parseIsolation({ isolation: "worker", module: new URL(echo).pathname, hasHandler: false }, where),
    ).toEqual(expected);
    expect(
      parseIsolation(
        { isolation: "process", module: echo, exportName: "quick", memoryLimitMb: 64, hasHandler: false },
        where,
      ),
    ).toEqual({ mode: "process", moduleUrl: echo.href, exportName: "quick", memoryLimitMb: 64 });
    expect(parseIsolation({ hasHandler: true }, where)).toBeUndefined();
  });

  it("refuses bad values with the task, the value and the fix", () => {
    const cases: [Parameters<typeof parseIsolation>[0], RegExp][] = [
      [
        { isolation: "thread" as never, module: echo, hasHandler: false },
        /isolation "thread" is invalid; use "none", "worker" or "process"/,
      ],
      [
        { isolation: "worker", hasHandler: true },
        /isolation "worker" needs the handler's module: pass module: new URL/,
      ],
      [
        { isolation: "worker", module: "./task.mjs", hasHandler: false },
        /module "\.\/task\.mjs" is invalid; give new URL\(/,
      ],
      [
        { isolation: "worker", module: "/nowhere/task.mjs", hasHandler: false },
        /module \/nowhere\/task\.mjs does not exist/,
      ],
      [
        { isolation: "worker", module: "https://example.com/t.mjs", hasHandler: false },
        /module "https:\/\/example\.com\/t\.mjs" is invalid/,
      ],
      [{ isolation: "worker", module: echo, hasHandler: true }, /has both handler and module; pass one/],
      [
        { isolation: "worker", module: echo, exportName: "a-b", hasHandler: false },
        /exportName "a-b" is invalid/,
      ],
      [
        { isolation: "worker", module: echo, memoryLimitMb: 8, hasHandler: false },
        /memoryLimitMb 8 is invalid; use a whole number of MB from 16 to 16384/,
      ],
      [
        { isolation: "worker", module: echo, memoryLimitMb: 100.5, hasHandler: false },
        /memoryLimitMb 100.5 is invalid/,
      ],
      [
        { module: echo, memoryLimitMb: 64, hasHandler: false },
        /memoryLimitMb applies to isolation "worker" or "process" only/,
      ],
    ];
    for (const [input, message] of cases) {
      expect(() => parseIsolation(input, where)).toThrow(message);
      expect(() => parseIsolation(input, where)).toThrow(/^task "t": /);
    }
  });
});

describe("parseSecretNames", () => {
  it("sorts and de-duplicates names; refuses names that are not environment variable names", () => {
    expect(parseSecretNames(["B_TOKEN", "A_KEY", "B_TOKEN"], where)).toEqual(["A_KEY", "B_TOKEN"]);
    expect(parseSecretNames(undefined, where)).toEqual([]);
    expect(() => parseSecretNames(["1ABC"], where)).toThrow(
      /task "t": secret name "1ABC" is invalid; use an environment variable name/,
    );
    expect(() => parseSecretNames("TOKEN" as never, where)).toThrow(
      /secrets "TOKEN" is invalid; pass a list of names/,
    );
  });
});

describe("TaskRegistry with isolation", () => {
  it("keeps the module spec and secrets, and names the register() call in errors", () => {
    const registry = new TaskRegistry();
    const task = registry.register({ name: "iso", isolation: "worker", module: echo, secrets: ["X_TOKEN"] });
    expect(task).toMatchObject({ handler: undefined, secrets: ["X_TOKEN"], module: { mode: "worker" } });
    expect(() => registry.register({ name: "bad", isolation: "process" })).toThrow(
      /task "bad" at test\/unit\/isolationSpec\.test\.ts:\d+: isolation "process" needs the handler's module/,
    );
  });
});

describe("readSecrets", () => {
  it("reads a file of the secrets directory before the environment, drops one trailing newline, and registers the value for redaction", async () => {
    const dir = await mkdtemp(path.join(tmpdir(), "cronwarden-secrets-unit-"));
    try {
      await writeFile(path.join(dir, "FILE_TOKEN"), "from-the-file-4471\n");
      const env = {
        [SECRETS_DIR_VARIABLE]: dir,
        FILE_TOKEN: "from-the-env-0000",
        ENV_TOKEN: "env-only-secret-8812",
      };
      expect(await readSecrets("t", ["ENV_TOKEN", "FILE_TOKEN"], env)).toEqual({
        ENV_TOKEN: "env-only-secret-8812",
        FILE_TOKEN: "from-the-file-4471",
      });
      expect(redactSecrets("token from-the-file-4471 and env-only-secret-8812")).toBe("token *** and ***");
      await expect(readSecrets("t", ["MISSING_TOKEN"], env)).rejects.toThrow(
        `task "t": secret MISSING_TOKEN is not set; set the environment variable MISSING_TOKEN or write the file ${path.join(dir, "MISSING_TOKEN")}`,
      );
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});

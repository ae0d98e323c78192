import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { loadTokenFile, parseTokenList } from "../../src/admin/index.js";
import { CronwardenError } from "../../src/index.js";
import { loadServiceSettings } from "../../src/serve/settings.js";

const ALICE = "alice-secret-0123456789";
const BOB = "bob-secret-0123456789ab";
const dir = mkdtempSync(path.join(tmpdir(), "cronwarden-tokens-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** The error thrown by `load`, checked to be INVALID_SETTINGS and never to carry a secret. */
function refusal(load: () => unknown, secrets: string[] = [ALICE, BOB]): string {
  try {
    load();
  } catch (error) {
    expect(error).toBeInstanceOf(CronwardenError);
    expect((error as CronwardenError).code).toBe("INVALID_SETTINGS");
    const message = (error as Error).message;
    for (const secret of secrets) expect(message).not.toContain(secret);
    return message;
  }
  throw new Error("expected a refusal");
}

describe("CRONWARDEN_TOKENS (name:role:secret, comma-separated)", () => {
  it("reads several tokens per role; the secret is everything after the second colon", () => {
    expect(
      parseTokenList(`ops-alice:operator:${ALICE}, dash:viewer:${BOB} ,ci:viewer:with:colons-0123456789`),
    ).toEqual([
      { name: "ops-alice", role: "operator", secret: ALICE },
      { name: "dash", role: "viewer", secret: BOB },
      { name: "ci", role: "viewer", secret: "with:colons-0123456789" },
    ]);
  });

  it.each([
    [`ops-alice:${ALICE}`, /entry 1 \(ops-alice:\.\.\.\) is not name:role:secret/],
    [ALICE, /entry 1 \(\(hidden\)\) is not name:role:secret/],
    [`ops-alice:admin:${ALICE}`, /token "ops-alice": role "admin" must be one of viewer, operator/],
    ["ops-alice:operator:short", /token "ops-alice": the secret must be at least 16 characters/],
    [`-bad:viewer:${ALICE}`, /token name "-bad" must be 1-64 letters/],
    [`a:viewer:${ALICE},a:operator:${BOB}`, /token name "a" is given twice/],
    [`a:viewer:${ALICE},b:operator:${ALICE}`, /token "b" has the same secret as another token/],
  ])("refuses %j with a message naming the variable and the entry, not the secret", (text, pattern) => {
    const message = refusal(() => parseTokenList(text));
    expect(message).toMatch(/^invalid admin tokens in CRONWARDEN_TOKENS: /);
    expect(message).toMatch(pattern);
  });
});

describe("CRONWARDEN_TOKENS_FILE (JSON or YAML)", () => {
  const write = (name: string, text: string) => {
    const file = path.join(dir, name);
    writeFileSync(file, text, { mode: 0o600 });
    return file;
  };

  it("reads { tokens: [...] } as YAML and a bare JSON list", () => {
    const yaml = write(
      "tokens.yaml",
      `tokens:\n  - name: ops-alice\n    role: operator\n    secret: ${ALICE}\n  - { name: dash, role: viewer, secret: ${BOB} }\n`,
    );
    expect(loadTokenFile(yaml).map((token) => `${token.name}:${token.role}`)).toEqual([
      "ops-alice:operator",
      "dash:viewer",
    ]);
    const json = write("tokens.json", JSON.stringify([{ name: "dash", role: "viewer", secret: BOB }]));
    expect(loadTokenFile(json)).toEqual([{ name: "dash", role: "viewer", secret: BOB }]);
  });

  it("refuses a missing file, bad syntax, a wrong shape and a bad entry, naming the file, never a secret", () => {
    expect(refusal(() => loadTokenFile(path.join(dir, "nope.yaml")))).toMatch(
      /CRONWARDEN_TOKENS_FILE \(.*nope\.yaml\): cannot read the file: ENOENT/,
    );
    expect(refusal(() => loadTokenFile(write("bad.json", `[{"name": "a", "secret": "${ALICE}"`)))).toMatch(
      /bad\.json\): not valid JSON or YAML/,
    );
    expect(refusal(() => loadTokenFile(write("shape.yaml", `secret: ${ALICE}\n`)))).toMatch(
      /must be a list of \{ name, role, secret \} entries/,
    );
    expect(
      refusal(() =>
        loadTokenFile(write("entry.yaml", `- { name: ops, role: operator, secret: ${ALICE}, extra: 1 }\n`)),
      ),
    ).toMatch(/entry 1 \("ops"\) must have exactly the string fields name, role and secret/);
  });
});

describe("service settings", () => {
  it("combines CRONWARDEN_TOKENS and CRONWARDEN_TOKENS_FILE; CRONWARDEN_MIGRATE defaults to true", () => {
    const file = path.join(dir, "service-tokens.json");
    writeFileSync(file, JSON.stringify({ tokens: [{ name: "dash", role: "viewer", secret: BOB }] }));
    const settings = loadServiceSettings({
      CRONWARDEN_TOKENS: `ops-alice:operator:${ALICE}`,
      CRONWARDEN_TOKENS_FILE: file,
    });
    expect(settings.adminTokens.map((token) => token.name)).toEqual(["ops-alice", "dash"]);
    expect(settings.CRONWARDEN_MIGRATE).toBe(true);
    expect(loadServiceSettings({ CRONWARDEN_MIGRATE: "false" }).CRONWARDEN_MIGRATE).toBe(false);
    expect(refusal(() => loadServiceSettings({ CRONWARDEN_MIGRATE: "no" }))).toMatch(
      /CRONWARDEN_MIGRATE="no": must be true or false/,
    );
    expect(
      refusal(() => loadServiceSettings({ CRONWARDEN_TOKENS: `ops:operator:${ALICE.slice(0, 8)}` })),
    ).toMatch(/CRONWARDEN_TOKENS: token "ops": the secret must be at least 16 characters/);
  });
});

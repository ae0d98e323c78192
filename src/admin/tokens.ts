import { readFileSync } from "node:fs";
import YAML from "yaml";
import { z } from "zod";
import { CronwardenError } from "../core/errors.js";

/**
 * Admin API roles. `viewer` reads (tasks, runs, config, audit, metrics, dashboard); `operator`
 * may also act (run now). An operator token is accepted wherever a viewer token is.
 */
export type AdminRole = "viewer" | "operator";

export const ADMIN_ROLES: readonly AdminRole[] = ["viewer", "operator"];

/** One bearer token: its name is what the audit trail and run records show; the secret never is. */
export interface AdminToken {
  name: string;
  role: AdminRole;
  secret: string;
}

export const TOKEN_VARIABLE = "CRONWARDEN_ADMIN_TOKEN";
export const TOKENS_VARIABLE = "CRONWARDEN_TOKENS";
export const TOKENS_FILE_VARIABLE = "CRONWARDEN_TOKENS_FILE";
export const MIN_TOKEN_LENGTH = 16;
/** The name CRONWARDEN_ADMIN_TOKEN (the `token` option) goes by. */
export const LEGACY_TOKEN_NAME = "admin";

export const TOKEN_NAME_PATTERN = /^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$/;
const NAME_RULE = "1-64 letters, digits, '.', '_', '@' or '-', starting with a letter or digit";

const fileSchema = z.union([z.object({ tokens: z.array(z.unknown()) }).strict(), z.array(z.unknown())]);
const entrySchema = z
  .object({
    name: z.string(),
    role: z.string(),
    secret: z.string(),
  })
  .strict();

/**
 * `name:role:secret` entries separated by commas, as in CRONWARDEN_TOKENS. The secret is what
 * follows the second colon (it may hold colons, not commas: use the file for those). Throws
 * CronwardenError INVALID_SETTINGS naming `origin` and the entry, never the secret.
 */
export function parseTokenList(text: string, origin = TOKENS_VARIABLE): AdminToken[] {
  const entries = text
    .split(",")
    .map((entry) => entry.trim())
    .filter((entry) => entry !== "");
  const tokens = entries.map((entry, index) => {
    const first = entry.indexOf(":");
    const second = first < 0 ? -1 : entry.indexOf(":", first + 1);
    if (first < 0 || second < 0) {
      const shown = first < 0 ? "(hidden)" : `${entry.slice(0, first)}:...`;
      throw invalid(
        origin,
        `entry ${index + 1} (${shown}) is not name:role:secret, e.g. ops-alice:operator:<secret of at least ${MIN_TOKEN_LENGTH} characters>`,
      );
    }
    return checkToken(
      { name: entry.slice(0, first), role: entry.slice(first + 1, second), secret: entry.slice(second + 1) },
      origin,
      index,
    );
  });
  return checkUnique(tokens, origin);
}

/**
 * A JSON or YAML file: `{ tokens: [{ name, role, secret }, ...] }` or the bare list. Throws
 * CronwardenError INVALID_SETTINGS naming the file and the entry, never a secret.
 */
export function loadTokenFile(path: string, variable = TOKENS_FILE_VARIABLE): AdminToken[] {
  const origin = `${variable} (${path})`;
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (error) {
    throw invalid(origin, `cannot read the file: ${(error as NodeJS.ErrnoException).code ?? "error"}`);
  }
  let document: unknown;
  try {
    document = YAML.parse(text);
  } catch (error) {
    // the parser quotes the offending text, which may be a secret: only its position is given
    const position = (error as { linePos?: Array<{ line: number; col: number }> }).linePos?.[0];
    throw invalid(
      origin,
      `not valid JSON or YAML${position ? ` (line ${position.line}, column ${position.col})` : ""}`,
    );
  }
  const parsed = fileSchema.safeParse(document);
  if (!parsed.success)
    throw invalid(
      origin,
      'must be a list of { name, role, secret } entries, or an object { "tokens": [ ... ] }',
    );
  const list = Array.isArray(parsed.data) ? parsed.data : parsed.data.tokens;
  const tokens = list.map((raw, index) => {
    const entry = entrySchema.safeParse(raw);
    if (!entry.success) {
      const name =
        typeof raw === "object" && raw !== null && typeof (raw as { name?: unknown }).name === "string"
          ? ` ("${(raw as { name: string }).name}")`
          : "";
      throw invalid(
        origin,
        `entry ${index + 1}${name} must have exactly the string fields name, role and secret`,
      );
    }
    return checkToken(entry.data, origin, index);
  });
  return checkUnique(tokens, origin);
}

/** Validates a token given in code (AdminServerOptions.tokens). */
export function checkTokens(tokens: readonly AdminToken[], origin: string): AdminToken[] {
  return checkUnique(
    tokens.map((token, index) => checkToken(token, origin, index)),
    origin,
  );
}

function checkToken(
  entry: { name: string; role: string; secret: string },
  origin: string,
  index: number,
): AdminToken {
  const name = entry.name.trim();
  if (!TOKEN_NAME_PATTERN.test(name))
    throw invalid(origin, `entry ${index + 1}: token name ${JSON.stringify(name)} must be ${NAME_RULE}`);
  if (!(ADMIN_ROLES as readonly string[]).includes(entry.role.trim()))
    throw invalid(
      origin,
      `token "${name}": role ${JSON.stringify(entry.role)} must be one of ${ADMIN_ROLES.join(", ")}`,
    );
  if (entry.secret.length < MIN_TOKEN_LENGTH)
    throw invalid(origin, `token "${name}": the secret must be at least ${MIN_TOKEN_LENGTH} characters`);
  if (/\s/.test(entry.secret))
    throw invalid(origin, `token "${name}": the secret must not contain whitespace`);
  return { name, role: entry.role.trim() as AdminRole, secret: entry.secret };
}

function checkUnique(tokens: AdminToken[], origin: string): AdminToken[] {
  const names = new Set<string>();
  const secrets = new Set<string>();
  for (const token of tokens) {
    if (names.has(token.name)) throw invalid(origin, `token name "${token.name}" is given twice`);
    if (secrets.has(token.secret))
      throw invalid(
        origin,
        `token "${token.name}" has the same secret as another token: each name needs its own secret, or the audit could not tell who asked`,
      );
    names.add(token.name);
    secrets.add(token.secret);
  }
  return tokens;
}

function invalid(origin: string, message: string): CronwardenError {
  return new CronwardenError("INVALID_SETTINGS", `invalid admin tokens in ${origin}: ${message}`);
}

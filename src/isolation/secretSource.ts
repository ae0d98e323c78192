import { readFile } from "node:fs/promises";
import path from "node:path";
import { registerSecret } from "../observability/redact.js";

/** The environment variable naming the directory of secret files (one file per name). */
export const SECRETS_DIR_VARIABLE = "CRONWARDEN_SECRETS_DIR";

export class MissingSecretError extends Error {
  override name = "MissingSecretError";
}

/**
 * A task's secrets, read at each run (docs/isolation.md, "Secrets"): a rotated value is used by the
 * next run without a restart. A name is looked up first as a file in the directory that
 * CRONWARDEN_SECRETS_DIR names (the layout Kubernetes and Docker mount secrets in: one file per
 * name, whose content is the value; one trailing newline is dropped), then in the environment.
 * The file wins: a mounted secret is rotated in place, the environment only at a restart.
 * Every value read is registered for redaction (src/observability/redact.ts) before any handler
 * sees it, so it never leaves the process in clear.
 */
export async function readSecrets(
  taskName: string,
  names: readonly string[],
  env: NodeJS.ProcessEnv = process.env,
): Promise<Readonly<Record<string, string>>> {
  const values: Record<string, string> = {};
  if (names.length === 0) return values;
  const dir = env[SECRETS_DIR_VARIABLE];
  for (const name of names) {
    const value = (dir ? await fromFile(dir, name) : undefined) ?? env[name];
    if (value === undefined || value === "")
      throw new MissingSecretError(
        `task "${taskName}": secret ${name} is not set; set the environment variable ${name}${dir ? ` or write the file ${path.join(dir, name)}` : ` or a file ${name} in the directory named by ${SECRETS_DIR_VARIABLE}`}`,
      );
    registerSecret(value);
    values[name] = value;
  }
  return Object.freeze(values);
}

async function fromFile(dir: string, name: string): Promise<string | undefined> {
  try {
    const text = await readFile(path.join(dir, name), "utf8");
    return text.endsWith("\r\n") ? text.slice(0, -2) : text.endsWith("\n") ? text.slice(0, -1) : text;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return undefined;
    throw new MissingSecretError(
      `secret file ${path.join(dir, name)} cannot be read (${(error as Error).message}); check its permissions`,
    );
  }
}

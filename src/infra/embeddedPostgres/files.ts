/**
 * Where an embedded cluster keeps its files, and the server log file's handling (markers, rotation, reading
 * back what one start wrote).
 *
 * For `dataDir = <parent>/<name>`:
 * - `<parent>/<name>/`                   the cluster (created by initdb on first start)
 * - `<parent>/<name>.credentials.json`   superuser password + last port (mode 0600), reused on restart
 * - `<parent>/<name>.log`                server log (initdb, pg_ctl and postmaster output)
 */
import fs from "node:fs/promises";
import path from "node:path";

const LOG_ROTATE_BYTES = 10 * 1024 * 1024;
/** How much of the log one start may contribute to an error message. */
const LOG_READ_BACK_BYTES = 64 * 1024;

export interface ClusterFiles {
  /** The cluster directory (absolute). */
  dataDir: string;
  credentialsFile: string;
  logFile: string;
}

export function clusterFiles(dataDir: string): ClusterFiles {
  const parent = path.dirname(dataDir);
  const name = path.basename(dataDir);
  return {
    dataDir,
    credentialsFile: path.join(parent, `${name}.credentials.json`),
    logFile: path.join(parent, `${name}.log`),
  };
}

export async function exists(p: string): Promise<boolean> {
  try {
    await fs.lstat(p);
    return true;
  } catch {
    return false;
  }
}

/** Appends to the log, creating it private (mode 0600) when missing. */
export async function appendToLog(logFile: string, text: string): Promise<void> {
  await fs.appendFile(logFile, text, { mode: 0o600 });
}

/** Keeps one previous log (`<log>.1`) once the log grows past 10 MiB. */
export async function rotateLog(logFile: string): Promise<void> {
  const info = await fs.stat(logFile).catch(() => undefined);
  if (info && info.size > LOG_ROTATE_BYTES) await fs.rename(logFile, `${logFile}.1`);
}

/** What the log holds from `offset` on (at most its last 64 KiB); empty when it cannot be read. */
export async function readLogFrom(logFile: string, offset: number): Promise<string> {
  try {
    const handle = await fs.open(logFile, "r");
    try {
      const { size } = await handle.stat();
      const start = Math.max(offset, size - LOG_READ_BACK_BYTES);
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

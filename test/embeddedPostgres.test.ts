import { type ChildProcess, spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import { appendFile, chmod, mkdir, mkdtemp, readFile, rm, stat, writeFile } from "node:fs/promises";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { createInterface } from "node:readline";
import { Writable } from "node:stream";
import { setTimeout as sleep } from "node:timers/promises";
import { fileURLToPath } from "node:url";
import pg from "pg";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { CronwardenError } from "../src/core/errors.js";
import { createLogger, type Logger } from "../src/core/logger.js";
import { type EmbeddedPostgres, startEmbeddedPostgres } from "../src/infra/embeddedPostgres/index.js";
import { signalPostmaster } from "../src/infra/embeddedPostgres/recovery.js";
import { adminUrl } from "./helpers/database.js";
import { pollUntil } from "./helpers/poll.js";

const projectRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const fixture = path.join(projectRoot, "test/fixtures/startEmbedded.ts");
const isRoot = process.getuid?.() === 0;

let root: string;
const servers: EmbeddedPostgres[] = [];
const children: ChildProcess[] = [];
const dataDirs: string[] = [];

beforeAll(async () => {
  root = await mkdtemp(path.join(os.tmpdir(), "cronwarden-embedded-test-"));
});

afterEach(async () => {
  for (const child of children.splice(0)) child.kill("SIGKILL");
  for (const server of servers.splice(0)) await server.stop().catch(() => {});
});

afterAll(async () => {
  // A failed test may leave a server started by a child: fast-shutdown it by the pid in its pid file.
  for (const dir of dataDirs) {
    const pid = await readPostmasterPid(dir);
    if (pid !== undefined && isAlive(pid)) {
      process.kill(pid, "SIGINT");
      await pollUntil(`postmaster ${pid} to exit`, () => !isAlive(pid), { timeoutMs: 30_000 }).catch(
        () => {},
      );
    }
  }
  if (root) await rm(root, { recursive: true, force: true });
});

function newDataDir(name: string): string {
  const dir = path.join(root, name, "data");
  dataDirs.push(dir);
  return dir;
}

function captureLogger(): {
  logger: Logger;
  text: () => string;
  lines: () => Array<Record<string, unknown>>;
} {
  let text = "";
  const sink = new Writable({
    write(chunk: Buffer, _encoding, callback) {
      text += chunk.toString("utf8");
      callback();
    },
  });
  return {
    logger: createLogger({ level: "debug", destination: sink }),
    text: () => text,
    lines: () =>
      text
        .split("\n")
        .filter((line) => line.trim())
        .map((line) => JSON.parse(line) as Record<string, unknown>),
  };
}

const quietLogger = () => captureLogger().logger;

async function start(dataDir: string, extra: { port?: number; logger?: Logger; database?: string } = {}) {
  const server = await startEmbeddedPostgres({ dataDir, logger: extra.logger ?? quietLogger(), ...extra });
  servers.push(server);
  return server;
}

async function query<T extends pg.QueryResultRow = Record<string, unknown>>(
  url: string,
  sql: string,
): Promise<T[]> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return (await client.query<T>(sql)).rows;
  } finally {
    await client.end();
  }
}

/** A live, non-zombie process (zombies are not reaped by every container init). */
function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === "EPERM";
  }
  try {
    // /proc/<pid>/stat: "pid (comm) S ..."; comm may contain spaces, the state follows the last ')'.
    const statText = readFileSync(`/proc/${pid}/stat`, "utf8");
    const state = statText.slice(statText.lastIndexOf(")") + 2, statText.lastIndexOf(")") + 3);
    return state !== "Z" && state !== "X";
  } catch {
    return false;
  }
}

async function readPostmasterPid(dataDir: string): Promise<number | undefined> {
  const text = await readFile(path.join(dataDir, "postmaster.pid"), "utf8").catch(() => undefined);
  const pid = text === undefined ? Number.NaN : Number.parseInt(text.split("\n")[0] ?? "", 10);
  return Number.isInteger(pid) && pid > 0 ? pid : undefined;
}

interface ChildInfo {
  port: number;
  dataDir: string;
  connectionString: string;
  postmasterPid: number;
}

/** Runs test/fixtures/startEmbedded.ts in a child node process; resolves once its server is up. */
function startInChild(dataDir: string): Promise<{ child: ChildProcess; info: ChildInfo }> {
  const child = spawn(process.execPath, ["--import", "tsx", fixture, dataDir], {
    cwd: projectRoot,
    stdio: ["ignore", "pipe", "pipe"],
  });
  children.push(child);
  let stderr = "";
  child.stderr?.on("data", (chunk: Buffer) => {
    stderr += chunk.toString("utf8");
  });
  return new Promise((resolve, reject) => {
    const lines = createInterface({ input: child.stdout as NodeJS.ReadableStream });
    lines.once("line", (line) => resolve({ child, info: JSON.parse(line) as ChildInfo }));
    child.once("exit", (code, signal) =>
      reject(new Error(`child exited (${code ?? signal}) before its server was ready:\n${stderr}`)),
    );
  });
}

function killAndWait(child: ChildProcess): Promise<void> {
  return new Promise((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) return resolve();
    child.once("exit", () => resolve());
    child.kill("SIGKILL");
  });
}

function listen(port = 0): Promise<net.Server> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once("error", reject);
    server.listen({ port, host: "127.0.0.1" }, () => resolve(server));
  });
}

describe("test harness", () => {
  it("provides an admin URL for the shared test server", async () => {
    const rows = await query<{ ok: number }>(adminUrl(), "SELECT 1 AS ok");
    expect(rows).toEqual([{ ok: 1 }]);
  });
});

describe("startEmbeddedPostgres", () => {
  it("initializes a cluster, creates the database and answers queries; logs port and dataDir, never the password", async () => {
    const dataDir = newDataDir("basic");
    const capture = captureLogger();
    const server = await start(dataDir, { logger: capture.logger });

    expect(server.dataDir).toBe(dataDir);
    expect(server.port).not.toBe(5432);
    expect(server.connectionString).toMatch(
      new RegExp(`^postgresql://postgres:[^@]+@127\\.0\\.0\\.1:${server.port}/cronwarden$`),
    );
    const [row] = await query<{ db: string; version: string }>(
      server.connectionString,
      "SELECT current_database() AS db, version() AS version",
    );
    expect(row?.db).toBe("cronwarden");
    expect(row?.version).toMatch(/^PostgreSQL 18\./);

    const started = capture.lines().find((line) => line.msg === "embedded PostgreSQL started");
    expect(started).toMatchObject({ port: server.port, dataDir });
    const password = decodeURIComponent(new URL(server.connectionString).password);
    expect(password.length).toBeGreaterThanOrEqual(20);
    expect(capture.text()).not.toContain(password);

    const credentialsFile = path.join(path.dirname(dataDir), "data.credentials.json");
    expect((await stat(credentialsFile)).mode & 0o777).toBe(0o600);
    expect(JSON.parse(await readFile(credentialsFile, "utf8"))).toMatchObject({
      password,
      port: server.port,
    });
    if (isRoot) {
      expect((await stat(dataDir)).uid).not.toBe(0); // owned by the unprivileged server user
    }
  });

  it("enforces scram-sha-256: passwords are SCRAM hashes and a wrong password is refused", async () => {
    const server = await start(newDataDir("scram"));
    const [encryption] = await query<{ password_encryption: string }>(
      server.connectionString,
      "SHOW password_encryption",
    );
    expect(encryption?.password_encryption).toBe("scram-sha-256");
    const [hash] = await query<{ rolpassword: string }>(
      server.connectionString,
      "SELECT rolpassword FROM pg_authid WHERE rolname = 'postgres'",
    );
    expect(hash?.rolpassword).toMatch(/^SCRAM-SHA-256\$/);
    const methods = await query<{ auth_method: string }>(
      server.connectionString,
      "SELECT DISTINCT auth_method FROM pg_hba_file_rules",
    );
    expect(methods.map((m) => m.auth_method)).toEqual(["scram-sha-256"]);

    const wrong = new URL(server.connectionString);
    wrong.password = "not-the-password";
    await expect(query(wrong.toString(), "SELECT 1")).rejects.toMatchObject({ code: "28P01" });
  });

  it("restarts on the same port with the same password and keeps the data; stop() is idempotent", async () => {
    const dataDir = newDataDir("restart");
    const first = await start(dataDir);
    await query(first.connectionString, "CREATE TABLE kept (v int); INSERT INTO kept VALUES (42)");
    await Promise.all([first.stop(), first.stop()]);
    await first.stop();
    expect(await readPostmasterPid(dataDir)).toBeUndefined();

    const second = await start(dataDir);
    expect(second.port).toBe(first.port);
    expect(second.connectionString).toBe(first.connectionString);
    expect(await query(second.connectionString, "SELECT v FROM kept")).toEqual([{ v: 42 }]);
  });

  it("recovers when the previous process was SIGKILLed and left its server running (orphan)", async () => {
    const dataDir = newDataDir("orphan");
    const { child, info } = await startInChild(dataDir);
    await killAndWait(child);
    expect(isAlive(info.postmasterPid)).toBe(true); // pg_ctl detached the server: it outlived its parent

    const capture = captureLogger();
    const server = await start(dataDir, { logger: capture.logger });
    expect(capture.text()).toContain("still running on this data dir");
    expect(server.port).toBe(info.port);
    expect(server.connectionString).toBe(info.connectionString);
    expect(isAlive(info.postmasterPid)).toBe(false); // the orphan was stopped, ours replaced it
    const newPid = await readPostmasterPid(dataDir);
    expect(newPid).not.toBe(info.postmasterPid);
    expect(await query(server.connectionString, "SELECT 1 AS ok")).toEqual([{ ok: 1 }]);
  });

  it("recovers from a stale postmaster.pid when the server was SIGKILLed too", async () => {
    const dataDir = newDataDir("stale");
    const { child, info } = await startInChild(dataDir);
    await killAndWait(child);
    process.kill(info.postmasterPid, "SIGKILL");
    await pollUntil("the killed postmaster to be gone", () => !isAlive(info.postmasterPid), {
      intervalMs: 20,
    });
    expect(await readPostmasterPid(dataDir)).toBe(info.postmasterPid); // stale file left behind

    const capture = captureLogger();
    const server = await start(dataDir, { logger: capture.logger });
    expect(capture.text()).toContain("stale postmaster.pid");
    expect(server.connectionString).toBe(info.connectionString);
    expect(await query(server.connectionString, "SELECT 1 AS ok")).toEqual([{ ok: 1 }]);
  });

  it("stop() succeeds when the server already died, and the next start cleans up after it", async () => {
    const dataDir = newDataDir("died");
    const server = await start(dataDir);
    const pid = await readPostmasterPid(dataDir);
    if (pid === undefined) throw new Error("no postmaster.pid after start");
    process.kill(pid, "SIGKILL");
    await pollUntil("the killed postmaster to be gone", () => !isAlive(pid), { intervalMs: 20 });

    await expect(server.stop()).resolves.toBeUndefined();
    const again = await start(dataDir);
    expect(again.connectionString).toBe(server.connectionString);
    expect(await query(again.connectionString, "SELECT 1 AS ok")).toEqual([{ ok: 1 }]);
  });

  it("stopWithoutWaiting() asks the server to stop and returns at once (a service exiting on a second signal)", async () => {
    const dataDir = newDataDir("at-once");
    const server = await start(dataDir);
    const pid = await readPostmasterPid(dataDir);
    if (pid === undefined) throw new Error("no postmaster.pid after start");
    server.stopWithoutWaiting();
    await pollUntil("the postmaster to exit", () => !isAlive(pid), { intervalMs: 20, timeoutMs: 30_000 });
    await expect(server.stop()).resolves.toBeUndefined();
    expect(() => server.stopWithoutWaiting()).not.toThrow(); // nothing left to signal
  });

  it("signals no process through a stale postmaster.pid whose pid now belongs to another process", async () => {
    const dataDir = newDataDir("stale-pid");
    await mkdir(dataDir, { recursive: true });
    const other = spawn("sleep", ["30"], { stdio: "ignore" });
    children.push(other);
    await writeFile(path.join(dataDir, "postmaster.pid"), `${other.pid}\n${dataDir}\n`);
    expect(signalPostmaster(dataDir, "SIGINT")).toBe(false);
    await sleep(100);
    expect(other.exitCode).toBeNull();
    expect(other.signalCode).toBeNull();
  });

  it("fails with a readable error naming the port when an explicitly given port is busy", async () => {
    const blocker = await listen();
    const address = blocker.address();
    const port = typeof address === "object" && address ? address.port : 0;
    try {
      const error = await start(newDataDir("busy"), { port }).then(
        () => undefined,
        (thrown: unknown) => thrown,
      );
      expect(error).toBeInstanceOf(CronwardenError);
      expect((error as CronwardenError).code).toBe("EMBEDDED_POSTGRES_FAILED");
      expect((error as CronwardenError).message).toContain(`port ${port}`);
      expect((error as CronwardenError).message).toContain("already in use");
      expect((error as CronwardenError).message).toContain("fix:");
    } finally {
      await new Promise((resolve) => blocker.close(resolve));
    }
  });

  it("reports the command, the log's last lines and a hint when the server cannot start", async () => {
    const dataDir = newDataDir("broken");
    const server = await start(dataDir);
    await server.stop();
    await appendFile(path.join(dataDir, "postgresql.conf"), "\nbogus_setting_for_test = 1\n");

    const error = await start(dataDir).then(
      () => undefined,
      (thrown: unknown) => thrown,
    );
    expect(error).toBeInstanceOf(CronwardenError);
    const message = (error as CronwardenError).message;
    expect(message).toContain("failed to start");
    expect(message).toContain("pg_ctl");
    expect(message).toContain('unrecognized configuration parameter "bogus_setting_for_test"');
    expect(message).toContain(`log: ${path.join(path.dirname(dataDir), "data.log")}`);
    expect(message).toContain("fix:");
  });

  it.skipIf(!isRoot)(
    "as root, runs a data dir the server user cannot traverse to via its cwd (-D /proc/self/cwd), and by path once it can",
    async () => {
      const dataDir = newDataDir("proc-cwd");
      // `root` is a 0700 root-owned mkdtemp dir, so the server user cannot traverse it.
      expect((await stat(root)).mode & 0o777).toBe(0o700);
      const firstLog = captureLogger();
      const first = await start(dataDir, { logger: firstLog.logger });
      expect(firstLog.lines().find((line) => line.msg === "embedded PostgreSQL started")).toMatchObject({
        mode: "proc-cwd",
      });
      const [row] = await query<{ data_directory: string }>(first.connectionString, "SHOW data_directory");
      expect(row?.data_directory).toBe("/proc/self/cwd");
      await query(first.connectionString, "CREATE TABLE kept (v int)");
      await first.stop();
      expect(await readPostmasterPid(dataDir)).toBeUndefined();

      // Once the server user can traverse to it, the same cluster runs by its path (setuid mode).
      await chmod(root, 0o711);
      try {
        const secondLog = captureLogger();
        const second = await start(dataDir, { logger: secondLog.logger });
        expect(secondLog.lines().find((line) => line.msg === "embedded PostgreSQL started")).toMatchObject({
          mode: "setuid",
        });
        expect(second.connectionString).toBe(first.connectionString);
        const [again] = await query<{ data_directory: string }>(
          second.connectionString,
          "SHOW data_directory",
        );
        expect(again?.data_directory).toBe(dataDir);
        expect(await query(second.connectionString, "SELECT count(*)::int AS n FROM kept")).toEqual([
          { n: 0 },
        ]);
        await second.stop();
      } finally {
        await chmod(root, 0o700);
      }
    },
  );
});

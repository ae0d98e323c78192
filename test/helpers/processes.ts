import { type ChildProcess, spawn } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import type { LogLine } from "./logs.js";
import { pollUntil } from "./poll.js";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");

/** A service process whose JSON log lines the test reads. */
export class ServiceProcess {
  readonly child: ChildProcess;
  readonly lines: LogLine[] = [];
  readonly stderr: string[] = [];
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  /**
   * Every process that holds its stdout and stderr has ended: the child and what it started with
   * them (the node that npx runs through a shell outlives npx when npx is signalled).
   */
  readonly closed: Promise<void>;

  /**
   * `entry` is a TypeScript file run with `node --import tsx`, or `{ command, args }` for any
   * other command line (npm start, the CLI, a container's CMD).
   */
  constructor(
    entry: string | { command: string; args: string[]; cwd?: string },
    environment: NodeJS.ProcessEnv,
  ) {
    const { command, args, cwd } =
      typeof entry === "string"
        ? { command: process.execPath, args: ["--import", "tsx", path.resolve(root, entry)], cwd: root }
        : { cwd: root, ...entry };
    this.child = spawn(command, args, {
      cwd,
      // a free port for each instance's admin API: several run on this machine at once
      env: { ...process.env, LOG_LEVEL: "debug", CRONWARDEN_ADMIN_PORT: "0", ...environment },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let buffered = "";
    this.child.stdout?.on("data", (chunk: Buffer) => {
      buffered += chunk.toString("utf8");
      const complete = buffered.split("\n");
      buffered = complete.pop() ?? "";
      for (const text of complete) {
        if (!text.trim()) continue;
        try {
          this.lines.push(JSON.parse(text) as LogLine);
        } catch {
          this.stderr.push(text);
        }
      }
    });
    this.child.stderr?.on("data", (chunk: Buffer) => this.stderr.push(chunk.toString("utf8")));
    this.exited = new Promise((resolve) =>
      this.child.once("exit", (code, signal) => resolve({ code, signal })),
    );
    this.closed = new Promise((resolve) => this.child.once("close", () => resolve()));
  }

  find(predicate: (line: LogLine) => boolean): LogLine | undefined {
    return this.lines.find(predicate);
  }

  waitFor(what: string, predicate: (line: LogLine) => boolean, timeoutMs = 30_000): Promise<LogLine> {
    return pollUntil(
      what,
      () => {
        if (this.child.exitCode !== null) {
          throw new Error(
            `process exited (${this.child.exitCode}) before ${what}: ${this.stderr.join("").slice(-2000)}`,
          );
        }
        return this.find(predicate);
      },
      { timeoutMs, intervalMs: 25 },
    ).catch((error: Error) => {
      throw new Error(`${error.message}\nlast log lines:\n${this.messages().slice(-15).join("\n")}`, {
        cause: error,
      });
    });
  }

  messages(): string[] {
    return this.lines.map((line) => String(line.msg));
  }

  async kill(signal: NodeJS.Signals = "SIGKILL"): Promise<void> {
    if (this.child.exitCode === null && this.child.signalCode === null) this.child.kill(signal);
    await this.exited;
  }
}

/** The pids of `pid`'s descendants, from /proc (Linux): what must be gone after a clean exit. */
export function descendantsOf(pid: number): number[] {
  const children = new Map<number, number[]>();
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, "utf8");
      // the fields after the command name, which is in parentheses and may hold spaces
      const parent = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
      children.set(parent, [...(children.get(parent) ?? []), Number(entry)]);
    } catch {
      // the process ended meanwhile
    }
  }
  const found: number[] = [];
  const visit = (parent: number) => {
    for (const child of children.get(parent) ?? []) {
      found.push(child);
      visit(child);
    }
  };
  visit(pid);
  return found;
}

/** Whether a pid is still a live (not zombie) process. */
export function isAlive(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return stat.slice(stat.lastIndexOf(")") + 2).split(" ")[0] !== "Z";
  } catch {
    return false;
  }
}

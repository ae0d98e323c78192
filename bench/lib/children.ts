/**
 * Worker processes of the bench: `node --import tsx bench/workers/<name>.ts` (or plain `node` on
 * the transpiled worker and the compiled package: bench/lib/plainNode.ts), with an IPC channel
 * for their messages. Every live worker is tracked, so a failing or interrupted bench can kill
 * them all (`killAllWorkers`); every wait has a deadline.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { createWriteStream } from "node:fs";
import { readFile } from "node:fs/promises";
import path from "node:path";
import { fileURLToPath } from "node:url";
import type { ParentMessage, WireMessage, WorkerMessage } from "./protocol.js";

export const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");

const live = new Set<Worker>();

interface Waiter {
  what: string;
  test: () => boolean;
  resolve: () => void;
  reject: (error: Error) => void;
  timer: NodeJS.Timeout;
}

type StartMessage = Extract<WorkerMessage, { type: "start" }>;

export class Worker {
  readonly label: string;
  readonly child: ChildProcess;
  readonly messages: WorkerMessage[] = [];
  // kept as messages arrive, so a wait checked on every message costs O(1), not O(messages):
  // at a herd of 10,000 a scan per message made the orchestrator take a core from the workers
  readonly #starts: StartMessage[] = [];
  readonly #startsPerSlot = new Map<number | null, number>();
  #fatal: Extract<WorkerMessage, { type: "fatal" }> | undefined;
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  readonly stderrFile: string;
  #waiters = new Set<Waiter>();
  #exit: { code: number | null; signal: NodeJS.Signals | null } | undefined;

  constructor(options: {
    label: string;
    worker: string;
    spec: unknown;
    logDir: string;
    /** Set: plain `node` runs `${plainNodeDir}/workers/<worker>.js` (bench/lib/plainNode.ts); else tsx runs the source. */
    plainNodeDir?: string;
    /** Options for plain `node` (before the script). */
    nodeFlags?: string[];
  }) {
    this.label = options.label;
    this.stderrFile = path.join(options.logDir, `${options.label}.stderr.log`);
    const stderr = createWriteStream(this.stderrFile, { flags: "a" });
    const args = options.plainNodeDir
      ? [...(options.nodeFlags ?? []), path.join(options.plainNodeDir, "workers", `${options.worker}.js`)]
      : ["--import", "tsx", path.join(repoRoot, "bench", "workers", `${options.worker}.ts`)];
    this.child = spawn(process.execPath, args, {
      cwd: repoRoot,
      env: { ...process.env, TZ: "UTC", BENCH_SPEC: JSON.stringify(options.spec) },
      stdio: ["ignore", "pipe", "pipe", "ipc"],
    });
    live.add(this);
    this.child.stdout?.pipe(stderr);
    this.child.stderr?.pipe(stderr);
    this.child.on("message", (wire: WireMessage) => {
      for (const message of wire.type === "batch" ? wire.messages : [wire]) this.#receive(message);
      this.#check();
    });
    this.exited = new Promise((resolve) => {
      this.child.once("exit", (code, signal) => {
        live.delete(this);
        this.#exit = { code, signal };
        for (const waiter of this.#waiters) {
          clearTimeout(waiter.timer);
          waiter.reject(
            new Error(`${this.label} exited (${signal ?? code}) while waiting for ${waiter.what}`),
          );
        }
        this.#waiters.clear();
        resolve({ code, signal });
      });
    });
  }

  get pid(): number {
    return this.child.pid ?? -1;
  }

  get alive(): boolean {
    return this.#exit === undefined;
  }

  /** Resolves once `test` holds (checked on each message); rejects at the deadline or on exit. */
  async waitUntil(what: string, test: () => boolean, timeoutMs: number): Promise<void> {
    const check = () => {
      const failed = this.#fatal;
      if (failed) throw new Error(`${this.label} failed: ${failed.message}`);
      return test();
    };
    if (check()) return;
    if (!this.alive) throw new Error(`${this.label} has exited; ${what} will not happen`);
    await new Promise<void>((resolve, reject) => {
      const waiter: Waiter = {
        what,
        test: check,
        resolve,
        reject,
        timer: setTimeout(() => {
          this.#waiters.delete(waiter);
          reject(new Error(`${this.label}: no ${what} within ${Math.round(timeoutMs / 1000)} s`));
        }, timeoutMs),
      };
      this.#waiters.add(waiter);
    }).catch(async (error: Error) => {
      throw new Error(`${error.message}\n--- ${this.stderrFile} (tail) ---\n${await this.stderrTail()}`);
    });
  }

  async ready(timeoutMs: number): Promise<Extract<WorkerMessage, { type: "ready" }>> {
    await this.waitUntil("ready", () => this.messages.some((message) => message.type === "ready"), timeoutMs);
    return this.messages.find((message) => message.type === "ready") as Extract<
      WorkerMessage,
      { type: "ready" }
    >;
  }

  /** The handler starts reported so far, in the order received. */
  starts(): readonly StartMessage[] {
    return this.#starts;
  }

  /** How many starts were reported for `slot` (`null`: starts whose slot the worker did not know). */
  startsOf(slot: number | null): number {
    return this.#startsPerSlot.get(slot) ?? 0;
  }

  /** The first fatal error the worker reported, if any. */
  get fatal(): Extract<WorkerMessage, { type: "fatal" }> | undefined {
    return this.#fatal;
  }

  send(message: ParentMessage): void {
    if (this.child.connected) this.child.send(message);
  }

  /** Asks for a clean stop; kills the process if it has not exited after `graceMs`. */
  async stop(graceMs = 5_000): Promise<void> {
    if (!this.alive) return;
    this.send({ type: "stop" });
    const timer = setTimeout(() => this.kill(), graceMs);
    await this.exited;
    clearTimeout(timer);
  }

  kill(signal: NodeJS.Signals = "SIGKILL"): void {
    if (this.alive) this.child.kill(signal);
  }

  /** /proc/<pid>/status VmRSS, in bytes. */
  async rssBytes(): Promise<number> {
    const status = await readFile(`/proc/${this.pid}/status`, "utf8");
    const match = /^VmRSS:\s+(\d+)\s+kB/m.exec(status);
    if (!match?.[1]) throw new Error(`no VmRSS for ${this.label} (pid ${this.pid})`);
    return Number(match[1]) * 1024;
  }

  async stderrTail(lines = 30): Promise<string> {
    const text = await readFile(this.stderrFile, "utf8").catch(() => "");
    return text.split("\n").slice(-lines).join("\n");
  }

  #receive(message: WorkerMessage): void {
    this.messages.push(message);
    if (message.type === "start") {
      this.#starts.push(message);
      this.#startsPerSlot.set(message.slot, (this.#startsPerSlot.get(message.slot) ?? 0) + 1);
    } else if (message.type === "fatal") this.#fatal ??= message;
  }

  #check(): void {
    for (const waiter of this.#waiters) {
      let done = false;
      try {
        done = waiter.test();
      } catch (error) {
        clearTimeout(waiter.timer);
        this.#waiters.delete(waiter);
        waiter.reject(error as Error);
        continue;
      }
      if (done) {
        clearTimeout(waiter.timer);
        this.#waiters.delete(waiter);
        waiter.resolve();
      }
    }
  }
}

/** SIGKILLs every worker still running and waits (bounded) for them to go. */
export async function killAllWorkers(): Promise<void> {
  const workers = [...live];
  for (const worker of workers) worker.kill();
  await Promise.race([
    Promise.all(workers.map((worker) => worker.exited)),
    new Promise((resolve) => setTimeout(resolve, 5_000)),
  ]);
}

export function liveWorkers(): number {
  return live.size;
}

/**
 * Polls `test` until it holds; fails at the deadline, or when a worker reported a fatal error,
 * or when every worker has exited.
 */
export async function waitFor(
  what: string,
  test: () => boolean,
  timeoutMs: number,
  workers: Worker[],
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (test()) return;
    for (const worker of workers) {
      const fatal = worker.fatal;
      if (fatal) throw new Error(`${worker.label} failed: ${fatal.message}`);
    }
    if (workers.length > 0 && workers.every((worker) => !worker.alive))
      throw new Error(`every worker has exited; ${what} will not happen`);
    if (Date.now() > deadline) throw new Error(`no ${what} within ${Math.round(timeoutMs / 1000)} s`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

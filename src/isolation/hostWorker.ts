import { type ChildProcess, fork } from "node:child_process";
import { createInterface } from "node:readline";
import type { Readable } from "node:stream";
import { fileURLToPath } from "node:url";
import { Worker } from "node:worker_threads";
import type { Logger } from "../core/logger.js";
import type { FromHost, ToHost } from "./protocol.js";

/** The host script beside this module: src/isolation/ under tsx and vitest, dist/isolation/ built. */
export const HOST_SCRIPT_URL = new URL("./host.mjs", import.meta.url);
/** The end of a child's stderr kept to tell why it died (V8 prints its heap failure there). */
const STDERR_TAIL_CHARS = 4096;
/** Lines a child writes to stderr within this long of each other are logged as one. */
const STDERR_BURST_MS = 50;
/** What V8 prints when a heap reaches its limit (src/isolation/host.mjs's process, --max-old-space-size). */
const HEAP_EXHAUSTED = /heap out of memory|Reached heap limit|Allocation failed/i;

/** The one listener of a host's messages and its end: the run in progress (src/isolation/isolatedRun.ts). */
export interface HostListener {
  message(message: FromHost): void;
  /** The host is gone, with the reason in words (`memory limit 256 MB exceeded`, `exited with code 1`). */
  ended(reason: string): void;
}

/**
 * One host of isolated handlers (src/isolation/host.mjs): a worker thread with a heap limit
 * (resourceLimits), or a child process with `--max-old-space-size`. Its environment is empty
 * (each run sets its own secrets: docs/isolation.md). What it logs outside a run, and raw output
 * to its stdout/stderr, goes to the instance's logger (redacted there).
 */
export class HostWorker {
  readonly mode: "worker" | "process";
  readonly memoryLimitMb: number;
  #listener: HostListener | undefined;
  #endReason: string | undefined;
  /** Resolves true when the host can take a run, false if it ended before. */
  readonly ready: Promise<boolean>;
  #readied: (ready: boolean) => void = () => {};
  readonly #logger: Logger;
  readonly #post: (message: ToHost) => void;
  readonly #kill: () => void;
  readonly #setRef: (ref: boolean) => void;

  constructor(mode: "worker" | "process", memoryLimitMb: number, logger: Logger) {
    this.mode = mode;
    this.memoryLimitMb = memoryLimitMb;
    this.#logger = logger;
    this.ready = new Promise((resolve) => {
      this.#readied = resolve;
    });
    const parts = mode === "worker" ? this.#startThread() : this.#startChild();
    this.#post = parts.post;
    this.#kill = parts.kill;
    this.#setRef = parts.setRef;
  }

  /** Set once the host has ended (it is never reused). */
  get ended(): string | undefined {
    return this.#endReason;
  }

  listen(listener: HostListener | undefined): void {
    this.#listener = listener;
  }

  post(message: ToHost): void {
    if (this.#endReason === undefined) this.#post(message);
  }

  /** Ends the host now (worker.terminate(), or SIGKILL to the child). */
  kill(reason: string): void {
    this.#end(reason);
    this.#kill();
  }

  /** An idle host must not keep the process alive; a busy one does, as an in-process handler would. */
  ref(ref: boolean): void {
    if (this.#endReason === undefined) this.#setRef(ref);
  }

  #end(reason: string): void {
    if (this.#endReason !== undefined) return;
    this.#endReason = reason;
    this.#readied(false);
    const listener = this.#listener;
    this.#listener = undefined;
    listener?.ended(reason);
  }

  #receive(message: FromHost): void {
    if (message.type === "ready") {
      this.#readied(true);
      return;
    }
    if (message.type === "log" && (message.id === null || this.#listener === undefined)) {
      this.#hostLine(message.level, message.msg);
      return;
    }
    this.#listener?.message(message);
  }

  #hostLine(level: string, text: string): void {
    const log = level === "error" || level === "fatal" ? "error" : level === "warn" ? "warn" : "info";
    this.#logger[log]({ isolation: this.mode }, `isolated handler host: ${text}`);
  }

  #memoryReason(): string {
    return `memory limit ${this.memoryLimitMb} MB exceeded`;
  }

  #startThread() {
    const worker = new Worker(HOST_SCRIPT_URL, {
      env: {},
      // none of the scheduler's own Node options (`--input-type`, `--import tsx`): a worker
      // inherits them by default, and some refuse to start it; the host needs none (host.mjs)
      execArgv: [],
      resourceLimits: { maxOldGenerationSizeMb: this.memoryLimitMb },
      stdout: true,
      stderr: true,
    });
    worker.on("message", (message: FromHost) => this.#receive(message));
    worker.on("error", (error: Error & { code?: string }) =>
      this.#end(
        error.code === "ERR_WORKER_OUT_OF_MEMORY"
          ? this.#memoryReason()
          : `crashed: ${error.name}: ${error.message}`,
      ),
    );
    worker.on("exit", (code) => this.#end(`exited with code ${code}`));
    this.#lines(worker.stdout, "info");
    this.#lines(worker.stderr, "warn");
    return {
      post: (message: ToHost) => worker.postMessage(message),
      kill: () => void worker.terminate().catch(() => {}),
      setRef: (ref: boolean) => (ref ? worker.ref() : worker.unref()),
    };
  }

  #startChild() {
    const child: ChildProcess = fork(fileURLToPath(HOST_SCRIPT_URL), [], {
      env: {},
      execArgv: [`--max-old-space-size=${this.memoryLimitMb}`],
      serialization: "advanced",
      stdio: ["ignore", "pipe", "pipe", "ipc"],
    });
    let stderrTail = "";
    child.stderr?.on("data", (chunk: Buffer) => {
      stderrTail = (stderrTail + chunk.toString("utf8")).slice(-STDERR_TAIL_CHARS);
    });
    child.on("message", (message: FromHost) => this.#receive(message));
    child.on("error", (error) => this.#end(`could not run: ${error.message}`));
    // `close`: after the child's stdio ended, so the heap failure V8 printed has been read
    child.on("close", (code, signal) =>
      this.#end(
        HEAP_EXHAUSTED.test(stderrTail)
          ? this.#memoryReason()
          : code !== null
            ? `exited with code ${code}`
            : `killed by ${signal ?? "a signal"}`,
      ),
    );
    if (child.stdout) this.#lines(child.stdout, "info");
    // stderr as one line per burst, not per line: V8's heap failure is some forty lines of GC
    // trace and native stack, written one by one
    let burst = "";
    let burstTimer: NodeJS.Timeout | undefined;
    const flush = () => {
      clearTimeout(burstTimer);
      const text = burst.trim();
      burst = "";
      if (text) this.#hostLine("warn", text.length > 2048 ? `${text.slice(0, 2048)}… (cut)` : text);
    };
    child.stderr?.on("data", (chunk: Buffer) => {
      burst += chunk.toString("utf8");
      clearTimeout(burstTimer);
      burstTimer = setTimeout(flush, STDERR_BURST_MS);
    });
    child.stderr?.on("end", flush);
    return {
      post: (message: ToHost) => {
        if (child.connected) child.send(message);
      },
      kill: () => child.kill("SIGKILL"),
      // the child's pipes keep the process alive while it lives: the scheduler's stop() ends it
      setRef: (ref: boolean) => {
        const channel = child.channel as { ref(): void; unref(): void } | undefined;
        if (ref) {
          child.ref();
          channel?.ref();
        } else {
          child.unref();
          channel?.unref();
        }
      },
    };
  }

  #lines(stream: Readable, level: "info" | "warn"): void {
    createInterface({ input: stream, crlfDelay: Number.POSITIVE_INFINITY }).on("line", (line) =>
      this.#hostLine(level, line),
    );
  }
}

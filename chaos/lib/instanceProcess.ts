/**
 * One chaos instance (chaos/instance.ts) as an OS process, seen from the orchestrator: its
 * ProcessRecord (when it was ready, how it ended), a SIGKILL, a graceful stop. Used by the chaos
 * run (chaos/run.ts) and by the process-level failover tests that check their record the same way
 * (test/integration/patroni.test.ts).
 */
import { type ChildProcess, spawn } from "node:child_process";
import { closeSync, openSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import type { ProcessRecord } from "./check.js";
import type { InstanceSpec } from "./spec.js";

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");

export class ChaosInstance {
  readonly record: ProcessRecord;
  readonly child: ChildProcess;
  readonly ready: Promise<void>;
  readonly exited: Promise<void>;
  expected: "killed" | "stopped" | null = null;
  readonly #stopTimeoutMs: number;

  constructor(
    label: string,
    spec: InstanceSpec,
    stderrFile: string,
    onCrash: (instance: ChaosInstance) => void,
    stopTimeoutMs: number,
  ) {
    this.#stopTimeoutMs = stopTimeoutMs;
    const fd = openSync(stderrFile, "a");
    this.child = spawn(process.execPath, ["--import", "tsx", path.join(repoRoot, "chaos", "instance.ts")], {
      cwd: repoRoot,
      env: { ...process.env, TZ: "UTC", CHAOS_SPEC: JSON.stringify(spec) },
      stdio: ["ignore", fd, fd, "ipc"],
    });
    closeSync(fd);
    const pid = this.child.pid ?? -1;
    this.record = {
      label,
      pid,
      instance: `${label}:${pid}`,
      spawnedAt: Date.now(),
      readyAt: null,
      endedAt: null,
      end: null,
      code: null,
      signal: null,
      stderrFile,
    };
    this.ready = new Promise((resolve, reject) => {
      this.child.on("message", (message: { type?: string; at?: number }) => {
        if (message.type !== "ready") return;
        this.record.readyAt = message.at ?? Date.now();
        resolve();
      });
      this.child.once("exit", () => reject(new Error(`${this.record.instance} exited before it was ready`)));
    });
    this.ready.catch(() => {});
    this.exited = new Promise((resolve) => {
      this.child.once("exit", (code, signal) => {
        this.record.endedAt = Date.now();
        this.record.code = code;
        this.record.signal = signal;
        this.record.end = this.expected ?? "crashed";
        if (this.expected === null) onCrash(this);
        resolve();
      });
    });
  }

  get alive(): boolean {
    return this.record.endedAt === null;
  }

  kill(): void {
    this.expected = "killed";
    this.child.kill("SIGKILL");
  }

  async stop(): Promise<void> {
    if (!this.alive) return;
    this.expected = "stopped";
    this.child.kill("SIGTERM");
    const timer = setTimeout(() => {
      this.expected = null;
      this.record.note = `no exit within ${this.#stopTimeoutMs / 1000} s of SIGTERM; killed`;
      this.child.kill("SIGKILL");
    }, this.#stopTimeoutMs);
    await this.exited;
    clearTimeout(timer);
    if (this.record.note?.startsWith("no exit")) this.record.end = "hung";
  }
}

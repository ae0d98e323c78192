import type { Logger } from "../core/logger.js";
import { HostWorker } from "./hostWorker.js";
import type { ModuleHandlerSpec } from "./isolationSpec.js";

/** Idle hosts kept warm per pool: enough for a herd's turnover, few enough to cost little memory. */
export const MAX_IDLE_HOSTS = 8;
/** An idle host unused this long is ended: a task that ran once a day keeps no thread or process. */
export const IDLE_HOST_TTL_MS = 60_000;

interface Idle {
  host: HostWorker;
  timer: NodeJS.Timeout;
}

/**
 * Warm hosts (src/isolation/hostWorker.ts) by what makes them interchangeable: the mode, the heap
 * limit, the module and export, and the secret names (tasks that share these share values too, so
 * a host reused across them holds nothing another could not read). A host goes back to its pool
 * only after a run that ended normally (its handler settled); a host that was killed, crashed or
 * ran out of memory is never reused.
 */
export class HostPool {
  readonly #idle = new Map<string, Idle[]>();
  readonly #busy = new Set<HostWorker>();
  readonly #logger: Logger;
  #closed = false;

  constructor(logger: Logger) {
    this.#logger = logger;
  }

  /** A warm host for the spec, or a new one. */
  acquire(
    spec: ModuleHandlerSpec & { mode: "worker" | "process" },
    secretNames: readonly string[],
  ): HostWorker {
    const key = keyOf(spec, secretNames);
    const idle = this.#idle.get(key);
    let host: HostWorker | undefined;
    while (!host && idle && idle.length > 0) {
      const entry = idle.pop();
      if (!entry) break;
      clearTimeout(entry.timer);
      if (entry.host.ended === undefined) host = entry.host;
    }
    host ??= new HostWorker(spec.mode, spec.memoryLimitMb, this.#logger);
    host.ref(true);
    this.#busy.add(host);
    return host;
  }

  /** Back to the pool after a run that ended normally; otherwise, or when the pool is full, ended. */
  release(
    host: HostWorker,
    spec: ModuleHandlerSpec & { mode: "worker" | "process" },
    secretNames: readonly string[],
    reusable: boolean,
  ): void {
    this.#busy.delete(host);
    host.listen(undefined);
    if (host.ended !== undefined) return;
    const key = keyOf(spec, secretNames);
    const idle = this.#idle.get(key) ?? [];
    if (!reusable || this.#closed || idle.length >= MAX_IDLE_HOSTS) {
      host.kill(reusable ? "not kept: the pool is full" : "not reused after an abnormal end");
      return;
    }
    host.ref(false);
    const entry: Idle = {
      host,
      timer: setTimeout(() => {
        const list = this.#idle.get(key);
        const index = list?.indexOf(entry) ?? -1;
        if (list && index >= 0) list.splice(index, 1);
        host.kill("idle");
      }, IDLE_HOST_TTL_MS).unref(),
    };
    idle.push(entry);
    this.#idle.set(key, idle);
  }

  /** Ends every host, idle or busy (the scheduler's stop, after its drain). */
  close(): void {
    this.#closed = true;
    for (const list of this.#idle.values()) {
      for (const entry of list) {
        clearTimeout(entry.timer);
        entry.host.kill("the scheduler stopped");
      }
    }
    this.#idle.clear();
    for (const host of this.#busy) host.kill("the scheduler stopped");
    this.#busy.clear();
  }

  /** Hosts alive: idle and busy (for tests and the docs' figures). */
  counts(): { idle: number; busy: number } {
    let idle = 0;
    for (const list of this.#idle.values()) idle += list.length;
    return { idle, busy: this.#busy.size };
  }
}

function keyOf(spec: ModuleHandlerSpec, secretNames: readonly string[]): string {
  return JSON.stringify([
    spec.mode,
    spec.memoryLimitMb,
    spec.moduleUrl,
    spec.exportName ?? null,
    secretNames,
  ]);
}

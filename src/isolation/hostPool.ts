import type { Logger } from "../core/logger.js";
import { HostWorker } from "./hostWorker.js";
import type { ModuleHandlerSpec } from "./isolationSpec.js";

/** Idle hosts kept warm per pool: enough for a herd's turnover, few enough to cost little memory. */
export const MAX_IDLE_HOSTS = 8;
/** An idle host unused this long is ended: a task that ran once a day keeps no thread or process. */
export const IDLE_HOST_TTL_MS = 60_000;
/**
 * Hosts starting at once per pool. A cold start costs far more than a run that returns at once:
 * a herd's runs wait for the first host free or started, and the starts do not crowd out the runs.
 */
export const MAX_STARTING_HOSTS = 2;

export type IsolatedSpec = ModuleHandlerSpec & { mode: "worker" | "process" };

interface Idle {
  host: HostWorker;
  timer: NodeJS.Timeout;
}

interface Waiter {
  resolve: (host: HostWorker) => void;
  reject: (error: Error) => void;
}

/** The hosts of one key. */
interface Pool {
  readonly spec: IsolatedSpec;
  readonly idle: Idle[];
  readonly waiters: Waiter[];
  starting: number;
}

/**
 * Warm hosts (src/isolation/hostWorker.ts) by what makes them interchangeable: the mode, the heap
 * limit, the module and export, and the secret names (tasks that share these share values too, so
 * a host reused across them holds nothing another could not read). A run takes an idle host, or
 * waits for the first host that comes free or finishes starting (a new one is started while fewer
 * than MAX_STARTING_HOSTS are). A host goes back to its pool only after a run that ended normally
 * (its handler settled); a host that was killed, crashed or ran out of memory is never reused.
 */
export class HostPool {
  readonly #pools = new Map<string, Pool>();
  readonly #busy = new Set<HostWorker>();
  readonly #logger: Logger;
  #closed = false;

  constructor(logger: Logger) {
    this.#logger = logger;
  }

  /** A warm host for the spec: an idle one, or the first that comes free or has started. */
  acquire(spec: IsolatedSpec, secretNames: readonly string[]): Promise<HostWorker> {
    if (this.#closed) return Promise.reject(new Error("the scheduler stopped: no isolated run starts"));
    const pool = this.#poolOf(spec, secretNames);
    const idle = this.#takeIdle(pool);
    if (idle) return Promise.resolve(this.#lend(idle));
    return new Promise((resolve, reject) => {
      pool.waiters.push({ resolve, reject });
      if (pool.starting < MAX_STARTING_HOSTS) this.#start(pool);
    });
  }

  /** Starts one host per pool of these specs ahead of their first run (the scheduler's start). */
  warm(specs: readonly { spec: IsolatedSpec; secretNames: readonly string[] }[]): void {
    for (const { spec, secretNames } of specs) {
      const pool = this.#poolOf(spec, secretNames);
      if (pool.idle.length === 0 && pool.starting === 0) this.#start(pool);
    }
  }

  /** Back to its pool after a run that ended normally; otherwise ended. */
  release(host: HostWorker, spec: IsolatedSpec, secretNames: readonly string[], reusable: boolean): void {
    this.#busy.delete(host);
    host.listen(undefined);
    if (host.ended !== undefined) return;
    if (!reusable) {
      host.kill("not reused after an abnormal end");
      return;
    }
    this.#offer(this.#poolOf(spec, secretNames), host);
  }

  /** Ends every host, idle or busy, and fails the runs waiting for one (the scheduler's stop, after its drain). */
  close(): void {
    this.#closed = true;
    for (const pool of this.#pools.values()) {
      for (const entry of pool.idle.splice(0)) {
        clearTimeout(entry.timer);
        entry.host.kill("the scheduler stopped");
      }
      for (const waiter of pool.waiters.splice(0))
        waiter.reject(new Error("the scheduler stopped before an isolated host was free"));
    }
    for (const host of this.#busy) host.kill("the scheduler stopped");
    this.#busy.clear();
  }

  /** Hosts alive: idle and busy. */
  counts(): { idle: number; busy: number } {
    let idle = 0;
    for (const pool of this.#pools.values()) idle += pool.idle.length;
    return { idle, busy: this.#busy.size };
  }

  #poolOf(spec: IsolatedSpec, secretNames: readonly string[]): Pool {
    const key = JSON.stringify([
      spec.mode,
      spec.memoryLimitMb,
      spec.moduleUrl,
      spec.exportName ?? null,
      secretNames,
    ]);
    let pool = this.#pools.get(key);
    if (!pool) {
      pool = { spec, idle: [], waiters: [], starting: 0 };
      this.#pools.set(key, pool);
    }
    return pool;
  }

  #takeIdle(pool: Pool): HostWorker | undefined {
    for (let entry = pool.idle.pop(); entry; entry = pool.idle.pop()) {
      clearTimeout(entry.timer);
      if (entry.host.ended === undefined) return entry.host;
    }
    return undefined;
  }

  #lend(host: HostWorker): HostWorker {
    host.ref(true);
    this.#busy.add(host);
    return host;
  }

  #start(pool: Pool): void {
    pool.starting += 1;
    const host = new HostWorker(pool.spec.mode, pool.spec.memoryLimitMb, this.#logger);
    void host.ready.then((ready) => {
      pool.starting -= 1;
      if (ready) {
        this.#offer(pool, host);
        return;
      }
      // a host that cannot start fails the oldest wait with its reason (the module is not at fault)
      const waiter = pool.waiters.shift();
      waiter?.reject(
        new Error(`${pool.spec.mode === "worker" ? "worker thread" : "child process"} ${host.ended}`),
      );
      if (pool.waiters.length > 0 && !this.#closed) this.#start(pool);
    });
  }

  /** A host free to run: to the oldest waiting run, else idle (ended when the pool is full or closed). */
  #offer(pool: Pool, host: HostWorker): void {
    const waiter = pool.waiters.shift();
    if (waiter) {
      waiter.resolve(this.#lend(host));
      return;
    }
    if (this.#closed || pool.idle.length >= MAX_IDLE_HOSTS) {
      host.kill(this.#closed ? "the scheduler stopped" : "not kept: the pool is full");
      return;
    }
    host.ref(false);
    const entry: Idle = {
      host,
      timer: setTimeout(() => {
        const index = pool.idle.indexOf(entry);
        if (index >= 0) pool.idle.splice(index, 1);
        host.kill("idle");
      }, IDLE_HOST_TTL_MS).unref(),
    };
    pool.idle.push(entry);
  }
}

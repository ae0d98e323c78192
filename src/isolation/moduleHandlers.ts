import type { Logger } from "../core/logger.js";
import { HostPool, type IsolatedSpec } from "./hostPool.js";
import { runIsolated } from "./isolatedRun.js";
import type { ModuleHandlerSpec } from "./isolationSpec.js";
import type { HandlerContext } from "./protocol.js";

/** What a module task brings to its run (src/scheduler/taskRegistry.ts RegisteredTask). */
export interface ModuleTask {
  readonly name: string;
  readonly module: ModuleHandlerSpec;
  readonly secrets: readonly string[];
  readonly timeoutMs: number | undefined;
}

type Handler = (context: HandlerContext) => unknown;

/**
 * Runs the handlers that tasks name by module (docs/isolation.md): in-process for `none` (the module
 * imported once, its export called), in a warm host of the pool (src/isolation/hostPool.ts) for
 * `worker` and `process`. The scheduler owns one and closes it after its drain.
 */
export class ModuleHandlers {
  readonly #pool: HostPool;
  readonly #graceMs: number;
  readonly #inProcess = new Map<string, Promise<Handler>>();

  constructor(options: { logger: Logger; graceMs: number }) {
    this.#pool = new HostPool(options.logger);
    this.#graceMs = options.graceMs;
  }

  /** Runs the task's handler for one attempt; resolves with what it returned (JSON), rejects with its failure. */
  async run(
    task: ModuleTask,
    context: HandlerContext,
    secrets: Readonly<Record<string, string>>,
  ): Promise<unknown> {
    const spec = task.module;
    if (spec.mode === "none") return (await this.#loaded(spec))(context);
    const isolated = { ...spec, mode: spec.mode };
    const host = await this.#pool.acquire(isolated, task.secrets);
    const outcome = await runIsolated({
      host,
      spec,
      context,
      secrets,
      timeoutMs: task.timeoutMs,
      graceMs: this.#graceMs,
    });
    this.#pool.release(host, isolated, task.secrets, outcome.reusable);
    if (!outcome.ok) throw outcome.error;
    return outcome.value;
  }

  /** Starts a host for each isolated task's pool ahead of its first run (the scheduler's start). */
  warm(tasks: readonly ModuleTask[]): void {
    const specs: { spec: IsolatedSpec; secretNames: readonly string[] }[] = [];
    for (const task of tasks) {
      const { mode } = task.module;
      if (mode !== "none") specs.push({ spec: { ...task.module, mode }, secretNames: task.secrets });
    }
    this.#pool.warm(specs);
  }

  /** Ends every host (the scheduler's stop, after the drain: no run is left to need one). */
  close(): void {
    this.#pool.close();
  }

  /** Hosts alive, idle and busy. */
  hosts(): { idle: number; busy: number } {
    return this.#pool.counts();
  }

  #loaded(spec: ModuleHandlerSpec): Promise<Handler> {
    const key = `${spec.moduleUrl}#${spec.exportName ?? ""}`;
    let loaded = this.#inProcess.get(key);
    if (!loaded) {
      loaded = import(spec.moduleUrl).then((module: Record<string, unknown>) => {
        const names = spec.exportName === undefined ? ["default", "handler"] : [spec.exportName];
        const name = names.find((candidate) => typeof module[candidate] === "function");
        if (name === undefined)
          throw new Error(
            `module ${spec.moduleUrl} has no function export ${names.map((each) => `"${each}"`).join(" or ")}; export the handler or set exportName`,
          );
        return module[name] as Handler;
      });
      // a module that failed to load is tried again at the next run (it may have been fixed)
      loaded.catch(() => this.#inProcess.delete(key));
      this.#inProcess.set(key, loaded);
    }
    return loaded;
  }
}

import { fileURLToPath } from "node:url";
import { CronwardenError } from "../core/errors.js";
import { TASK_NAME_PATTERN } from "../core/taskName.js";
import { type ModuleHandlerSpec, parseIsolation, parseSecretNames } from "../isolation/isolationSpec.js";
import type { TaskHandler, TaskRegistration } from "./taskDefinition.js";

export interface RegisteredTask {
  readonly name: string;
  /** The handler function; undefined for a task whose handler is a module's export (`module`). */
  readonly handler: TaskHandler | undefined;
  /** Where the module task's handler is and runs (docs/isolation.md); undefined for a handler function. */
  readonly module: ModuleHandlerSpec | undefined;
  /** The secret names it declared, sorted. */
  readonly secrets: readonly string[];
  readonly description: string | undefined;
  readonly timeoutMs: number | undefined;
  readonly retry: TaskRegistration["retry"];
  /** The sharded task's map and reduce (docs/sharding.md); undefined when it registered none. */
  readonly map: TaskRegistration["map"];
  readonly reduce: TaskRegistration["reduce"];
  /** `file:line` of the register() call, to name both sides of a duplicate. */
  readonly registeredAt: string;
}

/** The tasks code has registered. Config can only switch on/off and re-time these. */
export class TaskRegistry {
  readonly #tasks = new Map<string, RegisteredTask>();
  #sealed = false;
  /** names() once sealed: the set does not change after that, and each reconcile asks for it. */
  #names: ReadonlySet<string> | undefined;

  register(registration: TaskRegistration, registeredAt = callerLocation()): RegisteredTask {
    if (this.#sealed) {
      throw new CronwardenError(
        "SCHEDULER_STATE",
        `task "${registration.name}" registered at ${registeredAt} after the scheduler started; register every task before start()`,
      );
    }
    const { name, handler } = registration;
    if (typeof name !== "string" || !TASK_NAME_PATTERN.test(name)) {
      throw new CronwardenError(
        "INVALID_TASK_DEFINITION",
        `task name ${JSON.stringify(name)} at ${registeredAt} is invalid: use 1-200 ASCII letters (A-Z, a-z), digits, ".", "_", "-" or ":", starting with a letter or digit`,
      );
    }
    const where = `task "${name}" at ${registeredAt}`;
    if (handler !== undefined && typeof handler !== "function") {
      throw new CronwardenError(
        "INVALID_TASK_DEFINITION",
        `${where}: handler is not a function; pass register({ name, handler: async (ctx) => { ... } })`,
      );
    }
    const module = parseIsolation({ ...registration, hasHandler: handler !== undefined }, where);
    if (module === undefined && handler === undefined) {
      throw new CronwardenError(
        "INVALID_TASK_DEFINITION",
        `${where} has no handler function: pass register({ name, handler: async (ctx) => { ... } }) or a module (docs/isolation.md)`,
      );
    }
    const secrets = parseSecretNames(registration.secrets, where);
    const existing = this.#tasks.get(name);
    if (existing) {
      throw new CronwardenError(
        "DUPLICATE_TASK",
        `task "${name}" is registered twice: first at ${existing.registeredAt}, again at ${registeredAt}; task names must be unique`,
      );
    }
    const { timeoutMs } = registration;
    if (timeoutMs !== undefined && !(Number.isInteger(timeoutMs) && timeoutMs > 0)) {
      throw new CronwardenError(
        "INVALID_TASK_DEFINITION",
        `task "${name}" at ${registeredAt}: timeoutMs ${JSON.stringify(timeoutMs)} is invalid; use a whole number of milliseconds above 0`,
      );
    }
    const { retry } = registration;
    const validMs = (ms: number | undefined) => ms === undefined || (Number.isInteger(ms) && ms >= 0);
    if (
      retry !== undefined &&
      !(
        Number.isInteger(retry.maxRetries) &&
        retry.maxRetries >= 0 &&
        validMs(retry.delayMs) &&
        validMs(retry.maxDelayMs)
      )
    ) {
      throw new CronwardenError(
        "INVALID_TASK_DEFINITION",
        `task "${name}" at ${registeredAt}: retry ${JSON.stringify(retry)} is invalid; use { maxRetries: a whole number >= 0, delayMs?, maxDelayMs? (ms >= 0) }`,
      );
    }
    const task: RegisteredTask = {
      name,
      handler: module === undefined ? handler : undefined,
      module,
      secrets,
      description: registration.description,
      timeoutMs,
      retry,
      ...shardHooks(registration, registeredAt),
      registeredAt,
    };
    this.#tasks.set(name, task);
    return task;
  }

  /** After this, register() throws: the first reconcile must see every task. */
  seal(): void {
    this.#sealed = true;
  }

  get(name: string): RegisteredTask | undefined {
    return this.#tasks.get(name);
  }

  has(name: string): boolean {
    return this.#tasks.has(name);
  }

  list(): RegisteredTask[] {
    return [...this.#tasks.values()].sort((a, b) => a.name.localeCompare(b.name));
  }

  names(): ReadonlySet<string> {
    if (!this.#sealed) return new Set(this.#tasks.keys());
    this.#names ??= new Set(this.#tasks.keys());
    return this.#names;
  }
}

/** This module's directory (src/scheduler/ under tsx, dist/scheduler/ in the package), as URL and path. */
const OWN_DIR_URL = new URL(".", import.meta.url).href;
const OWN_DIR_PATH = fileURLToPath(OWN_DIR_URL);

/** The first stack frame outside the framework: where the user called register(). */
function callerLocation(): string {
  const frames = (new Error().stack ?? "").split("\n").slice(1);
  const outside = frames.find(
    (frame) => !frame.includes(OWN_DIR_URL) && !frame.includes(OWN_DIR_PATH) && !frame.includes("node:"),
  );
  const match = (outside ?? frames[0] ?? "").match(/\(?((?:file:\/\/)?[^\s()]+:\d+):\d+\)?\s*$/);
  const location =
    match?.[1]?.replace(/^file:\/\//, "").replace(`${process.cwd()}/`, "") ?? "unknown location";
  // a copy: V8's substrings point into their parent, so the location would keep the whole stack
  // text alive for the task's lifetime (about 400 bytes a task, 4 MB with 10,000 tasks)
  return Buffer.from(location, "utf8").toString("utf8");
}

/** The registration's map and reduce, checked: functions, and only beside an in-process handler. */
function shardHooks(
  registration: TaskRegistration,
  registeredAt: string,
): Pick<RegisteredTask, "map" | "reduce"> {
  const { name, map, reduce } = registration;
  for (const [field, value] of [
    ["map", map],
    ["reduce", reduce],
  ] as const) {
    if (value !== undefined && typeof value !== "function")
      throw new CronwardenError(
        "INVALID_TASK_DEFINITION",
        `task "${name}" at ${registeredAt}: ${field} must be a function (docs/sharding.md), got ${typeof value}`,
      );
  }
  if ((map || reduce) && registration.isolation !== undefined && registration.isolation !== "none")
    throw new CronwardenError(
      "INVALID_TASK_DEFINITION",
      `task "${name}" at ${registeredAt}: a sharded task (map or reduce) runs its shards in-process; isolation "${registration.isolation}" is not supported for it: drop isolation or the map and reduce`,
    );
  return { map, reduce };
}

import { existsSync } from "node:fs";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { CronwardenError } from "../core/errors.js";

/**
 * Where a task's handler runs (docs/isolation.md):
 * - `none`: on the scheduler's own thread, as a function or a module loaded in-process;
 * - `worker`: in a worker thread with a heap limit, terminated at its timeout plus grace;
 * - `process`: in a child process with a heap limit, killed at its timeout plus grace.
 */
export type IsolationMode = "none" | "worker" | "process";

export const ISOLATION_MODES: readonly IsolationMode[] = ["none", "worker", "process"];

/** The heap limit of a `worker` or `process` task without `memoryLimitMb`. */
export const DEFAULT_MEMORY_LIMIT_MB = 256;
/** Below this V8 cannot start a heap with room for a handler; above it, one handler could starve the host. */
export const MIN_MEMORY_LIMIT_MB = 16;
export const MAX_MEMORY_LIMIT_MB = 16_384;
/** An environment variable name (POSIX portable): what a secret's name must be to reach `process.env`. */
export const SECRET_NAME_PATTERN = /^[A-Za-z_][A-Za-z0-9_]{0,127}$/;

/** A handler loaded from a module: where it runs, and what it is given. */
export interface ModuleHandlerSpec {
  readonly mode: IsolationMode;
  /** The module's file URL (`file:///...`). */
  readonly moduleUrl: string;
  /** The export called; undefined: `default`, else `handler`. */
  readonly exportName: string | undefined;
  readonly memoryLimitMb: number;
}

/** The isolation fields of a registration, as task code passes them (src/scheduler/taskDefinition.ts). */
export interface IsolationInput {
  isolation?: IsolationMode | undefined;
  module?: URL | string | undefined;
  exportName?: string | undefined;
  memoryLimitMb?: number | undefined;
  secrets?: readonly string[] | undefined;
  hasHandler: boolean;
}

/**
 * Checks a registration's isolation fields (the registry calls it; `where` names the task and the
 * register() call). Returns the module spec, or undefined for a `none` task with a handler function.
 */
export function parseIsolation(input: IsolationInput, where: string): ModuleHandlerSpec | undefined {
  const mode = input.isolation ?? "none";
  if (!ISOLATION_MODES.includes(mode)) {
    throw invalid(where, `isolation ${JSON.stringify(mode)} is invalid; use "none", "worker" or "process"`);
  }
  if (input.module === undefined) {
    if (mode !== "none")
      throw invalid(
        where,
        `isolation "${mode}" needs the handler's module: pass module: new URL("./task.mjs", import.meta.url) (or an absolute path) instead of handler`,
      );
    if (input.memoryLimitMb !== undefined)
      throw invalid(
        where,
        `memoryLimitMb applies to isolation "worker" or "process" only; remove it or set isolation`,
      );
    return undefined;
  }
  if (input.hasHandler)
    throw invalid(where, `has both handler and module; pass one: module for a handler loaded from a file`);
  const moduleUrl = moduleUrlOf(input.module, where);
  const { exportName } = input;
  if (exportName !== undefined && !(typeof exportName === "string" && /^[A-Za-z_$][\w$]*$/.test(exportName)))
    throw invalid(
      where,
      `exportName ${JSON.stringify(exportName)} is invalid; name the module's export (a JavaScript identifier) or leave it out for "default" / "handler"`,
    );
  const memoryLimitMb = input.memoryLimitMb ?? DEFAULT_MEMORY_LIMIT_MB;
  if (
    !Number.isInteger(memoryLimitMb) ||
    memoryLimitMb < MIN_MEMORY_LIMIT_MB ||
    memoryLimitMb > MAX_MEMORY_LIMIT_MB
  )
    throw invalid(
      where,
      `memoryLimitMb ${JSON.stringify(input.memoryLimitMb)} is invalid; use a whole number of MB from ${MIN_MEMORY_LIMIT_MB} to ${MAX_MEMORY_LIMIT_MB}`,
    );
  if (mode === "none" && input.memoryLimitMb !== undefined)
    throw invalid(
      where,
      `memoryLimitMb applies to isolation "worker" or "process" only; remove it or set isolation`,
    );
  return { mode, moduleUrl, exportName, memoryLimitMb };
}

/** Checks the secret names of a registration; returns them sorted, without duplicates. */
export function parseSecretNames(secrets: readonly string[] | undefined, where: string): readonly string[] {
  if (secrets === undefined) return [];
  if (!Array.isArray(secrets))
    throw invalid(
      where,
      `secrets ${JSON.stringify(secrets)} is invalid; pass a list of names: secrets: ["API_TOKEN"]`,
    );
  for (const name of secrets) {
    if (typeof name !== "string" || !SECRET_NAME_PATTERN.test(name))
      throw invalid(
        where,
        `secret name ${JSON.stringify(name)} is invalid; use an environment variable name (letters, digits, "_", not starting with a digit)`,
      );
  }
  return [...new Set(secrets)].sort();
}

/** A module given as a URL or an absolute path, as a file URL of a file that exists. */
function moduleUrlOf(module: URL | string, where: string): string {
  let url: URL;
  if (module instanceof URL) url = module;
  else if (typeof module === "string" && module.startsWith("file:")) url = new URL(module);
  else if (typeof module === "string" && path.isAbsolute(module)) url = pathToFileURL(module);
  else
    throw invalid(
      where,
      `module ${JSON.stringify(module)} is invalid; give new URL("./task.mjs", import.meta.url) or an absolute path (a relative path would depend on the working directory)`,
    );
  if (url.protocol !== "file:")
    throw invalid(where, `module ${url.href} is not a file URL; handler modules are loaded from local files`);
  const file = fileURLToPath(url);
  if (!existsSync(file))
    throw invalid(
      where,
      `module ${file} does not exist; check the path (it is resolved when register() is called)`,
    );
  return url.href;
}

function invalid(where: string, message: string): CronwardenError {
  return new CronwardenError("INVALID_TASK_DEFINITION", `${where}: ${message}`);
}

import path from "node:path";
import { pathToFileURL } from "node:url";
import pg from "pg";
import { embeddedConnectionString } from "../infra/embeddedPostgres/index.js";
import type { TaskRegistration } from "../scheduler/taskDefinition.js";

/** What a CLI command returns: its exit code. Output goes through `out`/`err` so tests can read it. */
export interface CliIo {
  out: (line: string) => void;
  err: (line: string) => void;
  env: NodeJS.ProcessEnv;
  cwd: string;
}

export class CliError extends Error {
  constructor(
    message: string,
    readonly exitCode = 2,
  ) {
    super(message);
  }
}

/**
 * The registered task names, from `--tasks a,b,c` or `--tasks-module <file>` (a module exporting
 * `registerTasks(registrar)`, like the reference service's `tasks/index.ts`).
 */
export async function registeredNames(
  options: { tasks?: string | undefined; "tasks-module"?: string | undefined },
  io: CliIo,
): Promise<Set<string> | undefined> {
  if (options.tasks)
    return new Set(
      options.tasks
        .split(",")
        .map((name) => name.trim())
        .filter(Boolean),
    );
  const modulePath = options["tasks-module"];
  if (!modulePath) return undefined;
  const registerTasks = await importTasksModule(modulePath, io, "--tasks-module");
  const names = new Set<string>();
  registerTasks({ register: (task) => names.add(task.name) });
  return names;
}

type RegisterTasks = (registrar: { register(task: TaskRegistration): void }) => void;

/** Loads a task module's `registerTasks(registrar)` (a named or the default export). */
export async function importTasksModule(
  modulePath: string,
  io: CliIo,
  option: string,
): Promise<RegisterTasks> {
  const resolved = path.resolve(io.cwd, modulePath);
  let module: { registerTasks?: unknown; default?: unknown };
  try {
    module = (await import(pathToFileURL(resolved).href)) as typeof module;
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    // `export function` in a .js file of a project without "type": "module" (npm init's default)
    const esmInCommonJs =
      error instanceof SyntaxError && /\b(export|import)\b/.test(error.message) && resolved.endsWith(".js");
    const hint =
      code === "ERR_MODULE_NOT_FOUND" || code === "ENOENT"
        ? `check the path given to ${option}`
        : code === "ERR_UNKNOWN_FILE_EXTENSION"
          ? "compile it to JavaScript first, or install tsx (npm i -D tsx) to load TypeScript"
          : esmInCommonJs
            ? 'it is an ES module in a .js file of a CommonJS project: rename it to .mjs, set "type": "module" in package.json, or write exports.registerTasks = ...'
            : "fix the module";
    throw new CliError(
      `${option} ${modulePath}: cannot load ${resolved} (${(error as Error).message}); ${hint}`,
    );
  }
  // ESM: a named or the default export; CommonJS: `exports.registerTasks = ...` (a named export
  // to import()), or `module.exports = { registerTasks }` / `module.exports = registerTasks` (default)
  const commonJs = module.default as { registerTasks?: unknown } | undefined;
  const registerTasks =
    module.registerTasks ??
    (typeof commonJs === "object" && commonJs !== null ? commonJs.registerTasks : undefined) ??
    module.default;
  if (typeof registerTasks !== "function") {
    throw new CliError(
      `${option} ${modulePath} does not export registerTasks(registrar) (named or default)${option === "--tasks-module" ? "; pass --tasks name1,name2 instead" : ""}`,
    );
  }
  return registerTasks as RegisterTasks;
}

/** `--database-url`, else DATABASE_URL, else the embedded server of a service running with `.data/`. */
export async function databasePool(
  options: { "database-url"?: string | undefined },
  io: CliIo,
): Promise<pg.Pool> {
  const url =
    options["database-url"] ??
    io.env.DATABASE_URL ??
    (await embeddedConnectionString(path.resolve(io.cwd, io.env.CRONWARDEN_DATA_DIR ?? ".data", "postgres")));
  if (!url) {
    throw new CliError(
      "no database: pass --database-url, set DATABASE_URL, or run this in the folder of a running service that uses the embedded PostgreSQL (.data/)",
    );
  }
  const pool = new pg.Pool({ connectionString: url, max: 2, connectionTimeoutMillis: 5000 });
  pool.on("error", () => {});
  try {
    await pool.query("SELECT 1");
  } catch (error) {
    await pool.end();
    throw new CliError(`cannot reach the database: ${(error as Error).message}`);
  }
  return pool;
}

/** Left-aligned columns, for readable tables in a terminal. */
export function table(header: string[], rows: string[][]): string[] {
  const widths = header.map((title, column) =>
    Math.max(title.length, ...rows.map((row) => (row[column] ?? "").length)),
  );
  const line = (cells: string[]) =>
    cells
      .map((cell, column) => cell.padEnd(widths[column] ?? 0))
      .join("  ")
      .trimEnd();
  return [line(header), ...rows.map(line)];
}

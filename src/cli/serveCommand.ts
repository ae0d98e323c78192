import path from "node:path";
import { runService } from "../serve/runService.js";
import { CliError, type CliIo, importTasksModule } from "./common.js";

/**
 * `cronwarden serve --tasks <module> [--config <file>]`: the full service in this process (so
 * SIGTERM reaches the process that drains). Resolves once started; the process then runs until
 * a signal, and a failed start exits 1 after one fatal log line.
 */
export async function serveCommand(
  options: { tasks?: string | undefined; config?: string | undefined },
  io: CliIo,
): Promise<number> {
  const modulePath = options.tasks ?? io.env.CRONWARDEN_TASKS_MODULE;
  if (!modulePath) {
    throw new CliError(
      "serve needs the tasks module: pass --tasks ./dist/tasks/index.js (a module exporting registerTasks(registrar)) or set CRONWARDEN_TASKS_MODULE",
    );
  }
  const registerTasks = await importTasksModule(modulePath, io, "--tasks");
  await runService({
    registerTasks,
    environment: io.env,
    configFile: options.config === undefined ? undefined : path.resolve(io.cwd, options.config),
    defaultConfigFile: path.resolve(io.cwd, "tasks.yaml"),
  });
  return 0;
}

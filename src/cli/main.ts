import { parseArgs } from "node:util";
import { resumeCommand, runNowCommand, runsCommand, statusCommand } from "./adminCommands.js";
import { CliError, type CliIo } from "./common.js";
import { auditCommand, planCommand, validateCommand } from "./configCommands.js";
import { COMMAND_HELP, packageVersion } from "./help.js";
import { migrateCommand } from "./migrateCommand.js";
import { serveCommand } from "./serveCommand.js";

const USAGE = `usage: cronwarden <command> [options]   (cronwarden <command> --help for one command)

  serve --tasks <module> [--config <file>]
      run the service: scheduler, admin API, dashboard, metrics, alerts; drains on SIGTERM
  validate <file> [--tasks a,b | --tasks-module tasks/index.ts] [--min-interval-ms N] [--timezone TZ]
      check a config file with the scheduler's rules; exit 0 valid, 1 rejected entries, 2 unreadable
  plan <file> (--tasks a,b | --tasks-module tasks/index.ts) [--database-url URL]
      show what a reconcile would change in the live database, changing nothing
  audit [--task NAME] [--limit N] [--namespace NS] [--database-url URL] [--json]
      the audit trail (config changes, drift repairs, run-now requests with who asked), newest first
  migrate [--check] [--database-url URL]
      create or upgrade the database schema (Agenda's tables and cronwarden's) and exit; run it
      with a role that may change the schema, and the service with CRONWARDEN_MIGRATE=false.
      --check changes nothing: exit 0 current, 1 a migration is needed
  status [--url URL] [--token TOKEN] [--json]
      every task: schedule, next and last run, last outcome; exit 0 all well, 3 when an enabled
      task's last run failed or a missed slot is reported, 2 when the API cannot be used
  runs <task> [--limit N] [--url URL] [--token TOKEN] [--json]
      the task's finished runs, newest slot first (N 1-500, default 20)
  run <task> [--url URL] [--token TOKEN]
      run the task now; exit 0 queued, 1 refused (unknown task, running, disabled)
  resume <task> [--url URL] [--token TOKEN]
      resume a task paused by failure (pauseOnFailure); exit 0 resumed, 1 refused (unknown, not paused)

The database is --database-url, else DATABASE_URL, else the embedded PostgreSQL of a service
running in this folder (.data/). status, runs, run and resume talk to a running service's admin API at
--url, else CRONWARDEN_ADMIN_URL, else http://127.0.0.1:8787, with --token, else
CRONWARDEN_ADMIN_TOKEN (prefer the variable: a command line is visible to other users): a
viewer token is enough for status and runs, run and resume need an operator token.
--version prints the version; --help (on any command) its usage; both exit 0.`;

export async function runCli(argv: string[], io: CliIo): Promise<number> {
  const [command, ...rest] = argv;
  if (command === "--version" || command === "-v" || command === "version") {
    io.out(packageVersion());
    return 0;
  }
  const usageOf = (name: string | undefined) => (name && COMMAND_HELP[name]) || USAGE;
  try {
    const { values, positionals } = parseCommandLine(rest, usageOf(command));
    if (values.version) {
      io.out(packageVersion());
      return 0;
    }
    if (values.help) {
      io.out(usageOf(command));
      return 0;
    }
    const file = () => {
      const [first] = positionals;
      if (!first) throw new CliError(`${command} needs a config file\n\n${usageOf(command)}`);
      return first;
    };
    const task = () => {
      const [first] = positionals;
      if (!first) throw new CliError(`${command} needs a task name\n\n${usageOf(command)}`);
      return first;
    };
    switch (command) {
      case "serve":
        return await serveCommand(values, io);
      case "validate":
        return await validateCommand(file(), values, io);
      case "plan":
        return await planCommand(file(), values, io);
      case "audit":
        return await auditCommand(values, io);
      case "migrate":
        return await migrateCommand(values, io);
      case "status":
        return await statusCommand(values, io);
      case "runs":
        return await runsCommand(task(), values, io);
      case "run":
        return await runNowCommand(task(), values, io);
      case "resume":
        return await resumeCommand(task(), values, io);
      case undefined:
      case "help":
      case "-h":
      case "--help":
        io.out(USAGE);
        return command === undefined ? 2 : 0;
      default:
        throw new CliError(`unknown command "${command}"\n\n${USAGE}`);
    }
  } catch (error) {
    io.err(`cronwarden ${command ?? ""}: ${(error as Error).message}`);
    return error instanceof CliError ? error.exitCode : 2;
  }
}

/** parseArgs with every command's options; a bad option is a CliError (exit 2) with the usage. */
function parseCommandLine(args: string[], usage: string) {
  try {
    return parseArgs({
      args,
      allowPositionals: true,
      options: {
        tasks: { type: "string" },
        "tasks-module": { type: "string" },
        "min-interval-ms": { type: "string" },
        timezone: { type: "string" },
        "database-url": { type: "string" },
        task: { type: "string" },
        limit: { type: "string" },
        namespace: { type: "string" },
        url: { type: "string" },
        token: { type: "string" },
        config: { type: "string" },
        json: { type: "boolean" },
        "with-downstream": { type: "boolean" },
        check: { type: "boolean" },
        help: { type: "boolean", short: "h" },
        version: { type: "boolean" },
      },
    });
  } catch (error) {
    throw new CliError(`${(error as Error).message}\n\n${usage}`);
  }
}

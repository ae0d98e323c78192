import { parseArgs } from "node:util";
import { CliError, type CliIo } from "./common.js";
import { auditCommand, planCommand, validateCommand } from "./configCommands.js";

const USAGE = `usage: cronwarden <command> [options]

  validate <file> [--tasks a,b | --tasks-module tasks/index.ts] [--min-interval-ms N] [--timezone TZ]
      check a config file with the scheduler's rules; exit 0 valid, 1 rejected entries, 2 unreadable
  plan <file> (--tasks a,b | --tasks-module tasks/index.ts) [--database-url URL]
      show what a reconcile would change in the live database, changing nothing
  audit [--task NAME] [--limit N] [--namespace NS] [--database-url URL]
      the audit trail of applied changes, newest first

The database is --database-url, else DATABASE_URL, else the embedded PostgreSQL of a service
running in this folder (.data/).`;

export async function runCli(argv: string[], io: CliIo): Promise<number> {
  const [command, ...rest] = argv;
  try {
    const { values, positionals } = parseArgs({
      args: rest,
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
      },
    });
    const file = () => {
      const [first] = positionals;
      if (!first) throw new CliError(`${command} needs a config file\n\n${USAGE}`);
      return first;
    };
    switch (command) {
      case "validate":
        return await validateCommand(file(), values, io);
      case "plan":
        return await planCommand(file(), values, io);
      case "audit":
        return await auditCommand(values, io);
      case undefined:
      case "help":
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

import { closestName } from "../config/fleetGuard.js";
import { resumeCommand, runNowCommand, runsCommand, statusCommand } from "./adminCommands.js";
import { asksFor, type ParsedArguments, parseCommandArguments } from "./args.js";
import { CliError, type CliIo } from "./common.js";
import { auditCommand, planCommand, validateCommand } from "./configCommands.js";
import { COMMANDS, commandHelp, generalUsage, packageVersion } from "./help.js";
import { migrateCommand } from "./migrateCommand.js";
import { instancesCommand, pauseAllCommand, resumeAllCommand, searchCommand } from "./opsCommands.js";
import { serveCommand } from "./serveCommand.js";
import { shardsCommand } from "./shardCommands.js";
import {
  backfillCancelCommand,
  backfillCommand,
  backfillStatusCommand,
  backfillsCommand,
  rerunCommand,
} from "./slotCommands.js";

type Runner = (parsed: ParsedArguments, io: CliIo) => Promise<number>;

/** A command's values, typed as the command reads them: the parser gave it only its own option set, type-checked. */
const as = (values: ParsedArguments["values"]) => values as never;

const RUNNERS: Readonly<Record<string, Runner>> = {
  serve: ({ values }, io) => serveCommand(as(values), io),
  validate: ({ values, positional }, io) => validateCommand(positional as string, as(values), io),
  plan: ({ values, positional }, io) => planCommand(positional as string, as(values), io),
  audit: ({ values }, io) => auditCommand(as(values), io),
  migrate: ({ values }, io) => migrateCommand(as(values), io),
  status: ({ values }, io) => statusCommand(as(values), io),
  runs: ({ values, positional }, io) => runsCommand(positional as string, as(values), io),
  run: ({ values, positional }, io) => runNowCommand(positional as string, as(values), io),
  resume: ({ values, positional }, io) => resumeCommand(positional as string, as(values), io),
  "pause-all": ({ values }, io) => pauseAllCommand(as(values), io),
  "resume-all": ({ values }, io) => resumeAllCommand(as(values), io),
  instances: ({ values }, io) => instancesCommand(as(values), io),
  search: ({ values }, io) => searchCommand(as(values), io),
  rerun: ({ values, positional }, io) => rerunCommand(positional as string, as(values), io),
  shards: ({ values, positional }, io) => shardsCommand(positional as string, as(values), io),
  backfill: ({ values, positional }, io) => backfillCommand(positional as string, as(values), io),
  backfills: ({ values }, io) => backfillsCommand(as(values), io),
  "backfill-status": ({ values, positional }, io) =>
    backfillStatusCommand(positional as string, as(values), io),
  "backfill-cancel": ({ values, positional }, io) =>
    backfillCancelCommand(positional as string, as(values), io),
};

/**
 * The CLI: `cronwarden <command> [arguments]`. Each command parses its own option set; --help and
 * --version work on every command (exit 0). Exit codes: 0 done, 1 refused or rejected (each
 * command says), 2 bad arguments or an error, 3 `status`: a task needs attention; `plan
 * --exit-code`: 0 no changes, 2 changes pending, 1 rejected entries or an error.
 */
export async function runCli(argv: string[], io: CliIo): Promise<number> {
  const [command, ...rest] = argv;
  if (command === "--version" || command === "-v" || command === "version") {
    io.out(packageVersion());
    return 0;
  }
  if (command === undefined) {
    io.err(generalUsage());
    return 2;
  }
  if (command === "help" || command === "--help" || command === "-h") return help(rest, io);
  const spec = COMMANDS[command];
  const runner = RUNNERS[command];
  if (!spec || !runner) {
    const guess = closestName(command, Object.keys(COMMANDS));
    io.err(
      `cronwarden: unknown command "${command}"${guess ? ` (did you mean "${guess}"?)` : ""}; the commands are ${Object.keys(COMMANDS).join(", ")} (cronwarden help)`,
    );
    return 2;
  }
  switch (asksFor(rest)) {
    case "help":
      io.out(commandHelp(spec));
      return 0;
    case "version":
      io.out(packageVersion());
      return 0;
  }
  // plan --exit-code keeps 2 for "changes pending": an error, bad arguments included, is 1 there
  const errorCode = command === "plan" && rest.includes("--exit-code") ? 1 : undefined;
  try {
    return await runner(parseCommandArguments(spec, rest), io);
  } catch (error) {
    io.err(`cronwarden ${command}: ${(error as Error).message}`);
    return errorCode ?? (error instanceof CliError ? error.exitCode : 2);
  }
}

/** `cronwarden help [command]`: exit 0; an unknown command is named (exit 2). */
function help(topics: string[], io: CliIo): number {
  const [topic, ...extra] = topics;
  if (topic === undefined || topic === "--help" || topic === "-h") {
    io.out(generalUsage());
    return 0;
  }
  const spec = COMMANDS[topic];
  if (!spec || extra.length > 0) {
    const guess = spec ? undefined : closestName(topic, Object.keys(COMMANDS));
    io.err(
      spec
        ? `cronwarden help: one command at a time (cronwarden help ${topic})`
        : `cronwarden help: no command "${topic}"${guess ? ` (did you mean "${guess}"?)` : ""}; the commands are ${Object.keys(COMMANDS).join(", ")}`,
    );
    return 2;
  }
  io.out(commandHelp(spec));
  return 0;
}

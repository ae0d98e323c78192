import { parseArgs } from "node:util";
import { closestName } from "../config/fleetGuard.js";
import { CliError } from "./common.js";

/** One option of one command: what parseArgs needs, and what its help line says. */
export interface OptionSpec {
  type: "string" | "boolean";
  /** The value's name in the help (`--limit N`); string options only. */
  value?: string;
  description: string;
}

/** What a command accepts: its options (each command its own set) and its one positional, if any. */
export interface ArgumentSpec {
  command: string;
  /** `<file>` or `<task>`: required, exactly one; absent: the command takes no positional. */
  positional?: { name: string; what: string };
  options: Readonly<Record<string, OptionSpec>>;
  /** Options that exclude each other (`--tasks` and `--tasks-module`). */
  exclusive?: readonly (readonly string[])[];
  /** Said when `--json` is given to a command without it (instead of "unknown option"). */
  jsonRefusal?: string;
  /** The usage line, repeated under a parse error. */
  usage: string;
}

export interface ParsedArguments {
  values: Record<string, string | boolean | undefined>;
  positional: string | undefined;
}

/** Options every command takes; they are answered before the command's own options are checked. */
export const COMMON_OPTIONS: Readonly<Record<string, OptionSpec>> = {
  help: {
    type: "boolean",
    description: "print this help and exit 0 (as does cronwarden help <command>)",
  },
  version: { type: "boolean", description: "print the version and exit 0" },
};

/**
 * `--help`/`-h` or `--version` anywhere before a `--`: answered even when other arguments are
 * wrong, so that a user who asks for help gets it.
 */
export function asksFor(args: readonly string[]): "help" | "version" | undefined {
  for (const arg of args) {
    if (arg === "--") return undefined;
    if (arg === "--help" || arg === "-h") return "help";
    if (arg === "--version") return "version";
  }
  return undefined;
}

/**
 * Parses one command's arguments against its own option set. Every mistake is a CliError (exit 2)
 * that names the option or argument, the command, and the fix, followed by the command's usage
 * line: never Node's raw parseArgs text.
 */
export function parseCommandArguments(spec: ArgumentSpec, args: readonly string[]): ParsedArguments {
  const options = { ...spec.options, ...COMMON_OPTIONS };
  const { tokens } = parseArgs({
    args: [...args],
    strict: false,
    allowPositionals: true,
    tokens: true,
    options: Object.fromEntries(
      Object.entries(options).map(([name, option]) => [
        name,
        name === "help" ? { type: option.type, short: "h" } : { type: option.type },
      ]),
    ),
  });
  function fail(message: string): never {
    throw new CliError(`${message}\n${spec.usage}\n(cronwarden help ${spec.command} for every option)`);
  }
  const values: ParsedArguments["values"] = {};
  const positionals: string[] = [];
  for (const token of tokens) {
    if (token.kind === "option-terminator") continue;
    if (token.kind === "positional") {
      positionals.push(token.value);
      continue;
    }
    const option = options[token.name];
    const shown = token.rawName;
    const shortAlias = !shown.startsWith("--") && token.name !== "help";
    if (!option || shortAlias) {
      if (token.name === "json" && spec.jsonRefusal)
        fail(`${spec.command} does not take --json: ${spec.jsonRefusal}`);
      const known = Object.keys(spec.options).map((name) => `--${name}`);
      const guess = closestName(`--${token.name}`, known);
      fail(
        `unknown option ${shown} for ${spec.command}${guess ? ` (did you mean ${guess}?)` : ""}; ${
          known.length > 0 ? `${spec.command} takes ${known.join(", ")}` : `${spec.command} takes no options`
        }`,
      );
    }
    if (values[token.name] !== undefined) fail(`${shown} is given twice to ${spec.command}: give it once`);
    if (option.type === "boolean") {
      if (token.inlineValue) fail(`${shown} takes no value (got "${token.value}"): write ${shown} alone`);
      values[token.name] = true;
      continue;
    }
    const value = token.value;
    if (value === undefined || (!token.inlineValue && value.startsWith("--"))) {
      fail(
        `${shown} needs a value${value === undefined ? "" : ` (the next argument is the option ${value})`}: ${shown} ${option.value ?? "VALUE"}`,
      );
    }
    if (value === "") fail(`${shown} is empty: give it a ${option.value ?? "value"}`);
    values[token.name] = value;
  }
  for (const group of spec.exclusive ?? []) {
    const given = group.filter((name) => values[name] !== undefined);
    if (given.length > 1)
      fail(`${given.map((name) => `--${name}`).join(" and ")} exclude each other: pass one of them`);
  }
  const { positional } = spec;
  if (!positional) {
    if (positionals.length > 0)
      fail(`${spec.command} takes no arguments, got "${positionals[0]}" (options start with --)`);
    return { values, positional: undefined };
  }
  if (positionals.length === 0) fail(`${spec.command} needs <${positional.name}>: ${positional.what}`);
  if (positionals.length > 1)
    fail(
      `${spec.command} takes one <${positional.name}>, got ${positionals.length}: ${positionals.map((value) => `"${value}"`).join(", ")}`,
    );
  return { values, positional: positionals[0] };
}

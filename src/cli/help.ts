import { type ArgumentSpec, COMMON_OPTIONS, type OptionSpec } from "./args.js";

export { packageVersion } from "../version.js";

/**
 * Every command's arguments and help, in one place: the parser accepts exactly the options listed
 * here (each command its own set), and `cronwarden help <command>` / `<command> --help` print them.
 */
export interface CommandHelp extends ArgumentSpec {
  /** Under `usage:` in the general help. */
  summary: string;
  /** The paragraph under the usage line of the command's help. */
  description: string;
  /** After the option list: where the database or the admin API is found. */
  footer?: string;
}

const CONNECTION = `The database is --database-url, else DATABASE_URL, else the embedded PostgreSQL of a service
running in this folder (.data/).`;
const ADMIN = `Talks to a running service's admin API at --url, else CRONWARDEN_ADMIN_URL, else
http://127.0.0.1:8787, with --token, else CRONWARDEN_ADMIN_TOKEN (prefer the variable: a command
line is visible to other users).`;

const json = (what: string): OptionSpec => ({ type: "boolean", description: what });
const databaseUrl: OptionSpec = {
  type: "string",
  value: "URL",
  description: "else DATABASE_URL, else the embedded PostgreSQL of a service in this folder",
};
const adminOptions = {
  url: {
    type: "string",
    value: "URL",
    description: "the admin API (else CRONWARDEN_ADMIN_URL, else http://127.0.0.1:8787)",
  },
  token: { type: "string", value: "TOKEN", description: "a bearer token (else CRONWARDEN_ADMIN_TOKEN)" },
} satisfies Record<string, OptionSpec>;
/** The scheduler's rules a config file is checked with (validate and plan). */
const configRules = {
  "min-interval-ms": {
    type: "string",
    value: "N",
    description: "the shortest interval allowed (else CRONWARDEN_MIN_INTERVAL_MS, else 60000)",
  },
  timezone: {
    type: "string",
    value: "TZ",
    description: "for entries without one (else CRONWARDEN_TIMEZONE, else UTC)",
  },
} satisfies Record<string, OptionSpec>;
const taskNames = {
  tasks: { type: "string", value: "a,b", description: "the registered task names, comma-separated" },
  "tasks-module": {
    type: "string",
    value: "MODULE",
    description: "or the task module (exports registerTasks) to read them from",
  },
} satisfies Record<string, OptionSpec>;

const reason: OptionSpec = { type: "string", value: "TEXT", description: "why, kept in the audit trail" };
const withDownstream: OptionSpec = {
  type: "boolean",
  description: "the tasks that run after it follow each slot (docs/dependencies.md)",
};

/** Re-run a slot, backfill a range (docs/operations.md, "Re-run a slot", "Backfill"). */
const SLOT_COMMANDS: Record<string, CommandHelp> = {
  rerun: {
    command: "rerun",
    usage:
      "usage: cronwarden rerun <task> --slot TIME [--force] [--with-downstream] [--reason TEXT] [--url URL] [--token TOKEN] [--json]",
    summary: "re-run one slot under its own scheduledAt and run key; exit 0 queued, 1 refused",
    description: `Re-runs one slot of the task (a failed, skipped or interrupted one; a succeeded one with --force)
under the slot's own scheduledAt and run key, marked rerun with the token's name; audited. Exit 0
queued, 1 refused (unknown task or slot, running, already requested, succeeded without --force), 2 error.`,
    positional: { name: "task", what: "a task name" },
    options: {
      slot: { type: "string", value: "TIME", description: "the slot (its scheduledAt), ISO 8601" },
      force: { type: "boolean", description: "re-run a slot whose last run succeeded" },
      "with-downstream": withDownstream,
      reason,
      ...adminOptions,
      json: json("print the API's answer as JSON"),
    },
    footer: ADMIN,
  },
  shards: {
    command: "shards",
    usage: "usage: cronwarden shards <task> --slot TIME [--round N] [--url URL] [--token TOKEN] [--json]",
    summary: "a sharded slot's shards: state, instance, duration, outcome; its reduce and outcome",
    description: `Lists the shards of one slot of a sharded task (docs/sharding.md), each with its state (queued,
running, succeeded, failed, skipped), the instance that ran it, its attempts and duration, and the
slot's reduce and derived outcome. Exit 0 listed, 2 no sharded slot there or an error.`,
    positional: { name: "task", what: "a task name" },
    options: {
      slot: { type: "string", value: "TIME", description: "the slot (its scheduledAt), ISO 8601" },
      round: {
        type: "string",
        value: "N",
        description: "a round of the slot (a re-run opens one); default the latest",
      },
      ...adminOptions,
      json: json("print the API's answer as JSON"),
    },
    footer: ADMIN,
  },
  backfill: {
    command: "backfill",
    usage:
      "usage: cronwarden backfill <task> --from TIME --to TIME [--only-missing | --all] [--concurrency N] [--dry-run] [--with-downstream] [--reason TEXT] [--url URL] [--token TOKEN] [--json]",
    summary: "run every slot of a range of the task's schedule, each under its own identity",
    description: `Runs every slot of the task's schedule from --from to --to (both included), each once across the
instances under its own scheduledAt and run key (trigger backfill), in slot order, at most
--concurrency at a time (default 1). --only-missing (the default) skips slots whose run succeeded;
--all runs them too. --dry-run lists the slots and starts nothing. Audited. Exit 0 created (or
listed), 1 refused (unknown task, a running backfill over the range), 2 error.`,
    positional: { name: "task", what: "a task name" },
    exclusive: [["only-missing", "all"]],
    options: {
      from: { type: "string", value: "TIME", description: "the range's first time, ISO 8601" },
      to: { type: "string", value: "TIME", description: "the range's last time, ISO 8601" },
      "only-missing": { type: "boolean", description: "skip slots whose run succeeded (the default)" },
      all: { type: "boolean", description: "run every slot, those that succeeded too" },
      concurrency: {
        type: "string",
        value: "N",
        description: "at most N slots at a time (default 1, at most 100)",
      },
      "dry-run": { type: "boolean", description: "list the slots it would run; start nothing" },
      "with-downstream": withDownstream,
      reason,
      ...adminOptions,
      json: json("print the API's answer as JSON"),
    },
    footer: ADMIN,
  },
  backfills: {
    command: "backfills",
    usage: "usage: cronwarden backfills [--task TASK] [--url URL] [--token TOKEN] [--json]",
    summary: "the recent backfills with their progress",
    description: "Lists the recent backfills, newest first, with their state and progress.",
    options: {
      task: { type: "string", value: "TASK", description: "only this task's" },
      ...adminOptions,
      json: json("print the API's answer as JSON"),
    },
    footer: ADMIN,
  },
  "backfill-status": {
    command: "backfill-status",
    usage: "usage: cronwarden backfill-status <id> [--url URL] [--token TOKEN] [--json]",
    summary: "one backfill's state and progress",
    description:
      "Prints one backfill's state and how many of its slots are in each state. Exit 1: no such backfill.",
    positional: { name: "id", what: "a backfill id (cronwarden backfills lists them)" },
    options: { ...adminOptions, json: json("print the API's answer as JSON") },
    footer: ADMIN,
  },
  "backfill-cancel": {
    command: "backfill-cancel",
    usage: "usage: cronwarden backfill-cancel <id> [--reason TEXT] [--url URL] [--token TOKEN] [--json]",
    summary: "cancel a running backfill: its pending slots do not run",
    description: `Cancels a running backfill: its pending slots are not run; those running finish. Audited. Exit
0 cancelled, 1 refused (no such backfill, not running), 2 error.`,
    positional: { name: "id", what: "a backfill id (cronwarden backfills lists them)" },
    options: { reason, ...adminOptions, json: json("print the API's answer as JSON") },
    footer: ADMIN,
  },
};

export const COMMANDS: Readonly<Record<string, CommandHelp>> = {
  serve: {
    command: "serve",
    usage: "usage: cronwarden serve --tasks <module> [--config <file>]",
    summary: "run the service: scheduler, admin API, dashboard, metrics, alerts; drains on SIGTERM",
    description: `Runs the service: the scheduler on the config file, the admin API, the dashboard, metrics and
alerts, on DATABASE_URL or an embedded PostgreSQL, until SIGTERM/SIGINT (then it drains and exits 0).
As a service's entry point run node on the bin (node node_modules/cronwarden/bin/cronwarden.mjs serve)
or a package.json script that starts with exec: npx and npm exec run it through a shell, which a
SIGTERM sent to npm stops without passing it on (docs/operations.md, "Signals").`,
    options: {
      tasks: {
        type: "string",
        value: "<module>",
        description: "a JavaScript module exporting registerTasks(registrar) (or CRONWARDEN_TASKS_MODULE)",
      },
      config: {
        type: "string",
        value: "<file>",
        description: "the desired-state file, YAML or JSON (else CRONWARDEN_CONFIG_FILE, else ./tasks.yaml)",
      },
    },
    jsonRefusal: "it prints the service's log, which is JSON lines already (LOG_LEVEL sets how much)",
    footer: `Every other setting is an environment variable (see the README); a bad value stops the start
with its name, its value and the rule.`,
  },
  validate: {
    command: "validate",
    usage:
      "usage: cronwarden validate <file> [--tasks a,b | --tasks-module <module>] [--min-interval-ms N] [--timezone TZ] [--json]",
    summary: "check a config file with the scheduler's rules; exit 0 valid, 1 rejected entries, 2 unreadable",
    description: `Checks a config file with the scheduler's rules and prints every problem of every entry (and,
with the registered names, every entry whose task is not in the code). Changes nothing.
Exit 0 valid, 1 rejected entries, 2 unreadable file or bad arguments.`,
    positional: { name: "file", what: "a config file (YAML or JSON)" },
    options: {
      ...taskNames,
      ...configRules,
      json: json("print the result as one JSON object (every problem, the graph, the counts)"),
    },
    exclusive: [["tasks", "tasks-module"]],
  },
  plan: {
    command: "plan",
    usage:
      "usage: cronwarden plan <file> (--tasks a,b | --tasks-module <module>) [--database-url URL] [--exit-code] [--json]",
    summary: "show what a reconcile would change in the live database, changing nothing",
    description: `Shows what a reconcile would change in the live database, changing nothing.
Exit 0 (changes or not), 1 rejected entries, 2 error. With --exit-code, as terraform plan
-detailed-exitcode: 0 no changes, 2 changes pending, 1 rejected entries or an error.`,
    positional: { name: "file", what: "a config file (YAML or JSON)" },
    options: {
      ...taskNames,
      ...configRules,
      "database-url": databaseUrl,
      "exit-code": {
        type: "boolean",
        description:
          "exit 0 when nothing would change, 2 when changes are pending, 1 on rejected entries or errors",
      },
      json: json("print the plan as one JSON object (every action with its detail, the graph, the counts)"),
    },
    exclusive: [["tasks", "tasks-module"]],
    footer: CONNECTION,
  },
  audit: {
    command: "audit",
    usage: "usage: cronwarden audit [--task NAME] [--limit N] [--namespace NS] [--database-url URL] [--json]",
    summary: "the audit trail (config changes, drift repairs, run-now requests with who asked), newest first",
    description: "The audit trail of applied changes, newest first.",
    options: {
      task: { type: "string", value: "NAME", description: "one task's entries only" },
      limit: { type: "string", value: "N", description: "at most N entries (default 50)" },
      namespace: { type: "string", value: "NS", description: "else CRONWARDEN_NAMESPACE, else default" },
      "database-url": databaseUrl,
      json: json("print the entries as a JSON array"),
    },
    footer: CONNECTION,
  },
  migrate: {
    command: "migrate",
    usage: "usage: cronwarden migrate [--check] [--database-url URL] [--json]",
    summary: "create or upgrade the database schema and exit (--check: exit 1 if needed, change nothing)",
    description: `Creates or upgrades the database schema (Agenda's tables and cronwarden's) and exits. Run it with
a role that may change the schema, and the service with CRONWARDEN_MIGRATE=false.`,
    options: {
      check: {
        type: "boolean",
        description: "change nothing: exit 0 when the schema is current, 1 when a migration is needed",
      },
      "database-url": databaseUrl,
      json: json("print the result as one JSON object"),
    },
  },
  status: {
    command: "status",
    usage: "usage: cronwarden status [--url URL] [--token TOKEN] [--json]",
    summary: "every task: schedule, next and last run, last outcome; exit 3 when one needs attention",
    description: `Every task: schedule, next and last run, last outcome. Exit 0 all well, 3 when an enabled task's
last run failed, a missed slot is reported or a task is paused by failure, 2 when the API cannot
be used.`,
    options: {
      ...adminOptions,
      json: json(
        "print the tasks as a JSON array: every field the API gives (state among them) and attention",
      ),
    },
    footer: ADMIN,
  },
  runs: {
    command: "runs",
    usage: "usage: cronwarden runs <task> [--limit N] [--url URL] [--token TOKEN] [--json]",
    summary: "the task's finished runs, newest slot first",
    description: "The task's finished runs, newest slot first, a slot's attempts latest first.",
    positional: { name: "task", what: "a task name" },
    options: {
      limit: { type: "string", value: "N", description: "1-500, default 20" },
      ...adminOptions,
      json: json("print the runs as a JSON array: every field the API gives (the run id among them)"),
    },
    footer: ADMIN,
  },
  run: {
    command: "run",
    usage: "usage: cronwarden run <task> [--with-downstream] [--url URL] [--token TOKEN] [--json]",
    summary: "run the task now; exit 0 queued, 1 refused (unknown task, running, disabled)",
    description: "Runs the task now; exit 0 queued, 1 refused (unknown task, running, disabled), 2 error.",
    positional: { name: "task", what: "a task name" },
    options: {
      "with-downstream": {
        type: "boolean",
        description: "the tasks that run after it follow this run (docs/dependencies.md)",
      },
      ...adminOptions,
      json: json("print the API's answer as JSON"),
    },
    footer: ADMIN,
  },
  resume: {
    command: "resume",
    usage: "usage: cronwarden resume <task> [--url URL] [--token TOKEN] [--json]",
    summary: "resume a task paused by failure; exit 0 resumed, 1 refused (unknown, not paused)",
    description: `Resumes a task paused by failure (pauseOnFailure): enabled again, its next run following its
catchUp policy; audited with the token's name. Exit 0 resumed, 1 refused (unknown task, not
paused), 2 error.`,
    positional: { name: "task", what: "a task name" },
    options: { ...adminOptions, json: json("print the API's answer as JSON") },
    footer: ADMIN,
  },
  "pause-all": {
    command: "pause-all",
    usage: "usage: cronwarden pause-all --reason TEXT [--url URL] [--token TOKEN] [--json]",
    summary: "pause every task of the namespace on every instance (no job row changes); audited",
    description: `Turns the namespace's pause-all switch on: no run starts on any instance until resume-all; runs
in progress finish. The job rows are not changed, so resume-all restores exactly the state before,
and the slots missed meanwhile follow each task's catchUp (docs/operations.md, "Pause all").`,
    options: {
      reason: { type: "string", value: "TEXT", description: "why (required; kept in the audit trail)" },
      ...adminOptions,
      json: json("print the API's answer as JSON"),
    },
    footer: ADMIN,
  },
  "resume-all": {
    command: "resume-all",
    usage: "usage: cronwarden resume-all [--reason TEXT] [--url URL] [--token TOKEN] [--json]",
    summary: "lift pause-all; slots missed meanwhile follow each task's catchUp; audited",
    description: 'Turns the namespace\'s pause-all switch off (docs/operations.md, "Pause all").',
    options: {
      reason: { type: "string", value: "TEXT", description: "why (kept in the audit trail)" },
      ...adminOptions,
      json: json("print the API's answer as JSON"),
    },
    footer: ADMIN,
  },
  instances: {
    command: "instances",
    usage: "usage: cronwarden instances [--url URL] [--token TOKEN] [--json]",
    summary: "every instance: id, host, version, start, last liveness check, runs in progress, concurrency",
    description: `Every registered instance (live, or dead and not yet handed over) and those found dead in the
last day, with the tasks whose runs were handed over (docs/operations.md, "Instances").`,
    options: { ...adminOptions, json: json("print the instances as a JSON array") },
    footer: ADMIN,
  },
  search: {
    command: "search",
    usage:
      "usage: cronwarden search [--text WORDS] [--task NAME] [--outcome o,p] [--from ISO] [--to ISO] [--limit N] [--url URL] [--token TOKEN] [--json]",
    summary: "find runs by words in their error or log lines, task, outcome and time, newest first",
    description: `Finds run records, newest first, by words in their error, their reason or their handler's log
lines (whole words, case aside; "a phrase", -word to exclude, or), task, outcome and the time
they were recorded (docs/operations.md, "Search runs").`,
    options: {
      text: { type: "string", value: "WORDS", description: "words to find (e.g. ECONNRESET)" },
      task: { type: "string", value: "NAME", description: "one task's runs only" },
      outcome: {
        type: "string",
        value: "o,p",
        description: "succeeded, failed, skipped, interrupted (comma-separated)",
      },
      from: { type: "string", value: "ISO", description: "recorded at or after (e.g. 2030-01-31T00:00:00Z)" },
      to: { type: "string", value: "ISO", description: "recorded before" },
      limit: { type: "string", value: "N", description: "1-500, default 20" },
      ...adminOptions,
      json: json("print the runs and the next page's cursor as JSON"),
    },
    footer: ADMIN,
  },
  ...SLOT_COMMANDS,
};

/** `cronwarden help <command>` and `cronwarden <command> --help`. */
export function commandHelp(spec: CommandHelp): string {
  const rows = Object.entries({ ...spec.options, ...COMMON_OPTIONS }).map(([name, option]) => [
    `${name === "help" ? "-h, " : ""}--${name}${option.type === "string" ? ` ${option.value ?? "VALUE"}` : ""}`,
    option.description,
  ]);
  const width = Math.max(...rows.map(([flag]) => (flag ?? "").length));
  return [
    spec.usage,
    "",
    spec.description,
    "",
    "options:",
    ...rows.map(([flag, description]) => `  ${(flag ?? "").padEnd(width)}  ${description}`),
    ...(spec.footer ? ["", spec.footer] : []),
  ].join("\n");
}

/** `cronwarden help`: every command in one screen. */
export function generalUsage(): string {
  return [
    "usage: cronwarden <command> [options]   (cronwarden help <command>, or <command> --help, for one command)",
    "",
    ...Object.values(COMMANDS).flatMap((spec) => [
      `  ${spec.usage.replace(/^usage: cronwarden /, "")}`,
      `      ${spec.summary}`,
    ]),
    "",
    `${CONNECTION} status, runs, run, resume, pause-all, resume-all, instances and search talk to a
running service's admin API (--url, --token; a viewer token is enough for status, runs, instances and
search; run, resume, pause-all and resume-all need an operator token).
--json prints JSON on every command but serve (whose log is JSON lines already).
cronwarden --version prints the version; --help (on any command) its help; both exit 0.`,
  ].join("\n");
}

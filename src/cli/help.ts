export { packageVersion } from "../version.js";

const CONNECTION = `The database is --database-url, else DATABASE_URL, else the embedded PostgreSQL of a service
running in this folder (.data/).`;
const ADMIN = `Talks to a running service's admin API at --url, else CRONWARDEN_ADMIN_URL, else
http://127.0.0.1:8787, with --token, else CRONWARDEN_ADMIN_TOKEN (prefer the variable: a command
line is visible to other users).`;

/** `cronwarden <command> --help`. Every command also takes --help and --version. */
export const COMMAND_HELP: Record<string, string> = {
  migrate: `usage: cronwarden migrate [--check] [--database-url URL]

Creates or upgrades the database schema (Agenda's tables and cronwarden's) and exits. Run it with
a role that may change the schema, and the service with CRONWARDEN_MIGRATE=false.
  --check              change nothing: exit 0 when the schema is current, 1 when a migration is needed
  --database-url URL   else DATABASE_URL, else the embedded PostgreSQL of a service in this folder`,
  serve: `usage: cronwarden serve --tasks <module> [--config <file>]

Runs the service: the scheduler on the config file, the admin API, the dashboard, metrics and
alerts, on DATABASE_URL or an embedded PostgreSQL, until SIGTERM/SIGINT (then it drains).
  --tasks <module>   a JavaScript module exporting registerTasks(registrar) (or CRONWARDEN_TASKS_MODULE)
  --config <file>    the desired-state file, YAML or JSON (else CRONWARDEN_CONFIG_FILE, else ./tasks.yaml)
Every other setting is an environment variable (see the README); a bad value stops the start
with its name, its value and the rule.`,
  validate: `usage: cronwarden validate <file> [--tasks a,b | --tasks-module tasks/index.ts] [--min-interval-ms N] [--timezone TZ]

Checks a config file with the scheduler's rules and prints every problem of every entry.
Exit 0 valid, 1 rejected entries, 2 unreadable file or bad arguments.`,
  plan: `usage: cronwarden plan <file> (--tasks a,b | --tasks-module tasks/index.ts) [--database-url URL]

Shows what a reconcile would change in the live database, changing nothing.
${CONNECTION}`,
  audit: `usage: cronwarden audit [--task NAME] [--limit N] [--namespace NS] [--database-url URL] [--json]

The audit trail of applied changes, newest first; --json prints a JSON array.
${CONNECTION}`,
  status: `usage: cronwarden status [--url URL] [--token TOKEN] [--json]

Every task: schedule, next and last run, last outcome; --json prints the API's JSON array.
Exit 0 all well, 3 when an enabled task's last run failed, a missed slot is reported or a task is
paused by failure, 2 when the API cannot be used.
${ADMIN}`,
  runs: `usage: cronwarden runs <task> [--limit N] [--url URL] [--token TOKEN] [--json]

The task's finished runs, newest slot first, a slot's attempts latest first (N 1-500,
default 20); --json prints a JSON array.
${ADMIN}`,
  run: `usage: cronwarden run <task> [--with-downstream] [--url URL] [--token TOKEN]

Runs the task now; exit 0 queued, 1 refused (unknown task, running, disabled), 2 error.
--with-downstream: the tasks that run after it follow this run (docs/dependencies.md).
${ADMIN}`,
  resume: `usage: cronwarden resume <task> [--url URL] [--token TOKEN]

Resumes a task paused by failure (pauseOnFailure): enabled again, its next run following its
catchUp policy; audited with the token's name. Exit 0 resumed, 1 refused (unknown task, not
paused), 2 error.
${ADMIN}`,
};

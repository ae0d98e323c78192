import { DEFAULT_MIN_INTERVAL_MS } from "../config/cronValidator.js";
import type { DesiredState } from "../config/desiredState.js";
import { describeProblems, describeRejection, parseDesiredState } from "../config/desiredState.js";
import { describeSpec } from "../core/dependencies/spec.js";
import { describeCalendars } from "../core/policies/calendar.js";
import { readTaskJobs } from "../engine/jobReads.js";
import { unregisteredUpstreams } from "../reconcile/dependencyPlan.js";
import { type LiveJob, planReconcile, type ReconcileAction } from "../reconcile/reconcilePlan.js";
import { FileConfigSource } from "../sources/fileSource.js";
import { AuditLog } from "../store/auditLog.js";
import { CliError, type CliIo, databasePool, registeredNames, table } from "./common.js";
import { graphEntries, graphLines } from "./dependencyGraph.js";

export interface ConfigOptions {
  tasks?: string | undefined;
  "tasks-module"?: string | undefined;
  "min-interval-ms"?: string | undefined;
  timezone?: string | undefined;
  "database-url"?: string | undefined;
}

/** Reads and validates a config file with the scheduler's own rules; unreadable -> exit 2. */
async function readDesired(file: string, options: ConfigOptions, io: CliIo): Promise<DesiredState> {
  const source = new FileConfigSource({ path: file, missingHint: "check the path argument" });
  const given = options["min-interval-ms"] ?? io.env.CRONWARDEN_MIN_INTERVAL_MS;
  const minIntervalMs = Number(given ?? DEFAULT_MIN_INTERVAL_MS);
  if (!/^\d+$/.test(given ?? "0") || minIntervalMs < 1000) {
    const name =
      options["min-interval-ms"] === undefined ? "CRONWARDEN_MIN_INTERVAL_MS" : "--min-interval-ms";
    throw new CliError(`${name} ${given} is invalid: use a whole number of ms, at least 1000 (e.g. 60000)`);
  }
  try {
    const document = await source.load();
    return parseDesiredState(document.content, {
      defaultTimezone: options.timezone ?? io.env.CRONWARDEN_TIMEZONE ?? "UTC",
      rules: { minIntervalMs },
      now: new Date(),
      source: source.description,
      revision: document.revision,
    });
  } catch (error) {
    throw new CliError((error as Error).message);
  }
}

/** One problem `validate` found: its text line is `message`; `index` is the entry's place in `tasks`. */
export interface ValidateProblem {
  index: number;
  task: string | null;
  field: string;
  value: unknown;
  reason: string;
  message: string;
}

/**
 * `cronwarden validate <file> [--tasks a,b | --tasks-module tasks/index.ts]`: every problem of
 * every entry (the scheduler's rules; with the registered names, the entries whose task or
 * upstream is not in the code; a rejected entry whose name another entry has too). Exit 0 when
 * every entry is valid, 1 when some are rejected, 2 when the file cannot be read or parsed at all.
 */
export async function validateCommand(
  file: string,
  options: ConfigOptions & { json?: boolean | undefined },
  io: CliIo,
): Promise<number> {
  const desired = await readDesired(file, options, io);
  const registered = await registeredNames(options, io);
  const problems: ValidateProblem[] = desired.rejected.flatMap((entry) => {
    const messages = describeProblems(entry);
    return (entry.problems ?? [entry]).map((problem, at) => ({
      index: entry.index,
      task: entry.name ?? null,
      field: problem.field,
      value: problem.value,
      reason: problem.reason,
      message: messages[at] ?? describeRejection(entry),
    }));
  });
  const indexesOf = entryIndexes(desired.document);
  problems.push(...sharedNameProblems(desired, indexesOf));
  const refusedInCode = registered
    ? codeProblems(desired, registered, indexesOf, problems)
    : new Set<string>();
  // by entry, each entry's problems in the order found
  const ordered = problems.map((problem, at) => ({ problem, at }));
  ordered.sort((a, b) => a.problem.index - b.problem.index || a.at - b.at);
  const sorted = ordered.map(({ problem }) => problem);
  const rejectedIndexes = new Set(sorted.map((problem) => problem.index));
  const valid = desired.tasks.length - refusedInCode.size;
  const graph = graphEntries(desired, refusedInCode);
  if (options.json) {
    io.out(
      JSON.stringify(
        {
          file,
          revision: desired.revision,
          valid,
          rejected: rejectedIndexes.size,
          problemCount: sorted.length,
          namesChecked: registered !== undefined,
          tasks: desired.tasks.filter((task) => !refusedInCode.has(task.name)).map((task) => task.name),
          problems: sorted,
          dependencyGraph: graph,
        },
        null,
        2,
      ),
    );
    return sorted.length > 0 ? 1 : 0;
  }
  for (const problem of sorted) io.err(`invalid: ${problem.message}`);
  for (const line of graphLines(graph)) io.out(line);
  io.out(
    `${file}: ${valid} valid entr${valid === 1 ? "y" : "ies"}, ${rejectedIndexes.size} rejected, ${sorted.length} problem(s) (revision ${desired.revision})`,
  );
  if (!registered)
    io.out("task names not checked: pass --tasks or --tasks-module to check them against the code");
  return sorted.length > 0 ? 1 : 0;
}

/** A rejected entry that shares its name with another: the parser names duplicates among valid entries only. */
function sharedNameProblems(
  desired: DesiredState,
  indexesOf: ReadonlyMap<string, number[]>,
): ValidateProblem[] {
  const problems: ValidateProblem[] = [];
  for (const entry of desired.rejected) {
    const indexes = entry.name === undefined ? [] : (indexesOf.get(entry.name) ?? []);
    if (indexes.length < 2 || (entry.problems ?? [entry]).some((problem) => problem.field === "name"))
      continue;
    const reason = `appears ${indexes.length} times (tasks[${indexes.join("], tasks[")}]); keep exactly one entry per task`;
    problems.push({
      index: entry.index,
      task: entry.name ?? null,
      field: "name",
      value: entry.name,
      reason,
      message: `config tasks[${entry.index}] "${entry.name}": name ${JSON.stringify(entry.name)} is invalid: ${reason}`,
    });
  }
  return problems;
}

/**
 * With the names registered in code: the entries whose task or upstream is not among them (each
 * name once), added to `problems`. Returns the valid entries they refuse.
 */
function codeProblems(
  desired: DesiredState,
  registered: ReadonlySet<string>,
  indexesOf: ReadonlyMap<string, number[]>,
  problems: ValidateProblem[],
): Set<string> {
  const refusedInCode = new Set<string>();
  const named = new Set<string>();
  const inCode = (name: string, index: number) => {
    if (registered.has(name)) return true;
    if (named.has(name)) return false;
    named.add(name);
    const reason = "no task of that name is registered in code";
    problems.push({
      index,
      task: name,
      field: "name",
      value: name,
      reason,
      message: `config entry "${name}": ${reason}`,
    });
    return false;
  };
  const upstreamProblems = unregisteredUpstreams(desired.tasks, registered);
  for (const task of desired.tasks) {
    const index = indexesOf.get(task.name)?.[0] ?? -1;
    if (!inCode(task.name, index)) refusedInCode.add(task.name);
    const upstream = upstreamProblems.get(task.name);
    if (upstream !== undefined) {
      refusedInCode.add(task.name);
      problems.push({
        index,
        task: task.name,
        field: "after",
        value: task.after?.upstreams,
        reason: upstream,
        message: `config entry "${task.name}": after ${upstream}`,
      });
    }
  }
  for (const entry of desired.rejected) if (entry.name !== undefined) inCode(entry.name, entry.index);
  return refusedInCode;
}

/** Each name's entries (their indexes in `tasks`), read from the document as written. */
function entryIndexes(document: unknown): Map<string, number[]> {
  const indexes = new Map<string, number[]>();
  const tasks = (document as { tasks?: unknown } | null)?.tasks;
  if (!Array.isArray(tasks)) return indexes;
  tasks.forEach((raw: unknown, index) => {
    const name = typeof raw === "object" && raw !== null ? (raw as { name?: unknown }).name : undefined;
    if (typeof name === "string") indexes.set(name, [...(indexes.get(name) ?? []), index]);
  });
  return indexes;
}

/**
 * `cronwarden plan <file>`: what a reconcile would change against the live database, changing
 * nothing. Exit 0, or 1 when entries are rejected; with `exitCode` (--exit-code): 0 no changes,
 * 2 changes pending, 1 rejected entries (errors are 1 too: src/cli/main.ts).
 */
export async function planCommand(
  file: string,
  options: ConfigOptions & { json?: boolean | undefined; "exit-code"?: boolean | undefined },
  io: CliIo,
): Promise<number> {
  const desired = await readDesired(file, options, io);
  const registered = await registeredNames(options, io);
  if (!registered)
    throw new CliError(
      "plan needs the registered tasks: pass --tasks a,b,c or --tasks-module tasks/index.ts",
    );
  const pool = await databasePool(options, io);
  let live: LiveJob[];
  try {
    live = await readTaskJobs(pool);
  } catch (error) {
    // a database the scheduler never ran on has no job table yet: everything would be created
    if ((error as { code?: string }).code !== "42P01") throw error;
    live = [];
  } finally {
    await pool.end();
  }
  const plan = planReconcile(desired, live, registered);
  const changes = plan.actions.filter((action) => action.kind !== "reject" && action.kind !== "orphan");
  const rejected = new Set(
    plan.actions.flatMap((action) => (action.kind === "reject" && action.task ? [action.task] : [])),
  );
  const anyRejected = plan.actions.some((action) => action.kind === "reject");
  const code = anyRejected ? 1 : options["exit-code"] && changes.length > 0 ? EXIT_CHANGES_PENDING : 0;
  const graph = graphEntries(desired, rejected);
  const reported = plan.actions.length - changes.length;
  if (options.json) {
    io.out(
      JSON.stringify(
        {
          file,
          revision: desired.revision,
          changes: changes.length,
          unchanged: plan.unchanged.length,
          reported,
          changesPending: changes.length > 0,
          actions: plan.actions.map((action) => ({
            ...action,
            // a calendar's days can be thousands of events: the plan names the calendars
            ...(action.kind === "exclude"
              ? { exclude: describeCalendars(action.exclude), from: describeCalendars(action.from) }
              : {}),
            task: action.task ?? null,
            detail: describe(action),
          })),
          unchangedTasks: plan.unchanged,
          dependencyGraph: graph,
        },
        null,
        2,
      ),
    );
    return code;
  }
  for (const line of table(
    ["ACTION", "TASK", "DETAIL"],
    plan.actions.map((action) => [action.kind, action.task ?? "-", describe(action)]),
  )) {
    io.out(line);
  }
  for (const line of graphLines(graph)) io.out(line);
  io.out(`${changes.length} change(s), ${plan.unchanged.length} unchanged, ${reported} reported`);
  return code;
}

/** `plan --exit-code`: changes are pending (terraform plan -detailed-exitcode's 2). */
export const EXIT_CHANGES_PENDING = 2;

function describe(action: ReconcileAction): string {
  switch (action.kind) {
    case "create":
      return action.after
        ? `${describeSpec(action.after)}, ${action.enabled ? "enabled" : "disabled"}`
        : `${action.cron} (${action.timezone}), ${action.enabled ? "enabled" : "disabled"}`;
    default:
      return action.reason;
  }
}

/** `cronwarden audit [--task x] [--limit n] [--namespace ns]`: applied changes, newest first. */
export async function auditCommand(
  options: {
    task?: string | undefined;
    limit?: string | undefined;
    namespace?: string | undefined;
    "database-url"?: string | undefined;
    json?: boolean | undefined;
  },
  io: CliIo,
): Promise<number> {
  const limit = options.limit ?? "50";
  if (!/^\d+$/.test(limit) || Number(limit) < 1)
    throw new CliError(`--limit ${limit} is invalid: use a whole number of at least 1`);
  const pool = await databasePool(options, io);
  try {
    const entries = await new AuditLog(
      pool,
      options.namespace ?? io.env.CRONWARDEN_NAMESPACE ?? "default",
    ).list({
      task: options.task,
      limit: Number(limit),
    });
    if (options.json) {
      // every column of the table: BY is null for config changes
      io.out(
        JSON.stringify(
          entries.map((entry) => ({ ...entry, actor: entry.actor ?? null })),
          null,
          2,
        ),
      );
      return 0;
    }
    for (const line of table(
      ["AT", "TASK", "KIND", "FIELD", "OLD", "NEW", "BY", "REVISION", "INSTANCE"],
      entries.map((entry) => [
        entry.at.toISOString(),
        entry.task,
        entry.kind,
        entry.field,
        entry.oldValue ?? "-",
        entry.newValue ?? "-",
        entry.actor ?? "-",
        entry.revision,
        entry.instance,
      ]),
    )) {
      io.out(line);
    }
    return 0;
  } finally {
    await pool.end();
  }
}

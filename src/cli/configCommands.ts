import { DEFAULT_MIN_INTERVAL_MS } from "../config/cronValidator.js";
import type { DesiredState } from "../config/desiredState.js";
import { describeProblems, parseDesiredState } from "../config/desiredState.js";
import { describeSpec } from "../core/dependencies/spec.js";
import { readTaskJobs } from "../engine/jobReads.js";
import { unregisteredUpstreams } from "../reconcile/dependencyPlan.js";
import { type LiveJob, planReconcile, type ReconcileAction } from "../reconcile/reconcilePlan.js";
import { FileConfigSource } from "../sources/fileSource.js";
import { AuditLog } from "../store/auditLog.js";
import { CliError, type CliIo, databasePool, registeredNames, table } from "./common.js";
import { graphLines } from "./dependencyGraph.js";

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
  const minIntervalMs = Number(
    options["min-interval-ms"] ?? io.env.CRONWARDEN_MIN_INTERVAL_MS ?? DEFAULT_MIN_INTERVAL_MS,
  );
  if (!Number.isInteger(minIntervalMs) || minIntervalMs < 1000) {
    throw new CliError(
      `--min-interval-ms ${options["min-interval-ms"]} is invalid: use a whole number of ms, at least 1000`,
    );
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

/**
 * `cronwarden validate <file> [--tasks a,b | --tasks-module tasks/index.ts]`: exit 0 when every
 * entry is valid (and registered, when the task list is given), 1 when some are rejected, 2 when
 * the file cannot be read or parsed at all.
 */
export async function validateCommand(file: string, options: ConfigOptions, io: CliIo): Promise<number> {
  const desired = await readDesired(file, options, io);
  const registered = await registeredNames(options, io);
  const problems = desired.rejected.flatMap(describeProblems);
  const refusedInCode = new Set<string>();
  if (registered) {
    const upstreamProblems = unregisteredUpstreams(desired.tasks, registered);
    for (const task of desired.tasks) {
      if (!registered.has(task.name)) {
        problems.push(`config entry "${task.name}": no task of that name is registered in code`);
        refusedInCode.add(task.name);
      } else if (upstreamProblems.has(task.name)) {
        problems.push(`config entry "${task.name}": after ${upstreamProblems.get(task.name)}`);
        refusedInCode.add(task.name);
      }
    }
  }
  for (const problem of problems) io.err(`invalid: ${problem}`);
  for (const line of graphLines(desired, refusedInCode)) io.out(line);
  const rejectedEntries = new Set(desired.rejected.map((entry) => entry.index)).size;
  const valid = desired.tasks.length - refusedInCode.size;
  const unregistered = problems.length - desired.rejected.flatMap(describeProblems).length;
  io.out(
    `${file}: ${valid} valid entr${valid === 1 ? "y" : "ies"}, ${rejectedEntries + unregistered} rejected, ${problems.length} problem(s) (revision ${desired.revision})`,
  );
  if (!registered)
    io.out("task names not checked: pass --tasks or --tasks-module to check them against the code");
  return problems.length > 0 ? 1 : 0;
}

/** `cronwarden plan <file>`: what a reconcile would change against the live database, changing nothing. */
export async function planCommand(file: string, options: ConfigOptions, io: CliIo): Promise<number> {
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
  for (const line of table(
    ["ACTION", "TASK", "DETAIL"],
    plan.actions.map((action) => [action.kind, action.task ?? "-", describe(action)]),
  )) {
    io.out(line);
  }
  const rejected = new Set(
    plan.actions.flatMap((action) => (action.kind === "reject" && action.task ? [action.task] : [])),
  );
  for (const line of graphLines(desired, rejected)) io.out(line);
  io.out(
    `${changes.length} change(s), ${plan.unchanged.length} unchanged, ${plan.actions.length - changes.length} reported`,
  );
  return plan.actions.some((action) => action.kind === "reject") ? 1 : 0;
}

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
      io.out(JSON.stringify(entries, null, 2));
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

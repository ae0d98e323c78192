import { z } from "zod";
import { AdminClient, type AdminConnectionOptions } from "./adminClient.js";
import {
  resumeSchema,
  runNowSchema,
  runRecordSchema,
  type TaskStatusJson,
  taskStatusSchema,
} from "./adminResponses.js";
import { CliError, type CliIo, table } from "./common.js";

/** `status` exits 3 when a task needs attention (see needsAttention). */
export const EXIT_ATTENTION = 3;

/**
 * `cronwarden status`: every task's schedule, next and last run, last outcome. Exit 0 when all is
 * well, 3 when an enabled task's last run failed or a missed slot is reported, 2 on errors.
 */
export async function statusCommand(
  options: AdminConnectionOptions & { json?: boolean | undefined },
  io: CliIo,
): Promise<number> {
  const client = new AdminClient(options, io);
  const { body: tasks } = await client.request("GET", "/tasks", z.array(taskStatusSchema));
  const attention = tasks.filter((task) => needsAttention(task) !== undefined);
  if (options.json) {
    // every field the API gave (state, job, dependencies, ...) and the table's verdict: attention
    io.out(
      JSON.stringify(
        tasks.map((task) => ({ ...task, attention: needsAttention(task) ?? null })),
        null,
        2,
      ),
    );
    return attention.length === 0 ? 0 : EXIT_ATTENTION;
  }
  for (const line of table(
    ["TASK", "ENABLED", "SCHEDULE", "NEXT RUN", "LAST RUN", "OUTCOME", "FAILED SLOTS", "RUNNING", "NOTE"],
    tasks.map((task) => [
      task.name,
      task.job?.pausedByFailure
        ? "paused"
        : enabledOf(task) === undefined
          ? "-"
          : enabledOf(task)
            ? "yes"
            : "no",
      scheduleOf(task),
      time(task.job?.nextRunAt),
      time(task.job?.lastRunAt),
      task.lastOutcome ?? "-",
      failedSlots(task),
      task.running ? `on ${task.runningOn ?? "?"}` : "-",
      noteOf(task),
    ]),
  )) {
    io.out(line);
  }
  if (attention.length === 0) {
    io.out(`${tasks.length} task(s), none needs attention`);
    return 0;
  }
  io.out(
    `${attention.length} task(s) need attention: ${attention.map((task) => `${task.name} (${needsAttention(task)})`).join(", ")}`,
  );
  return EXIT_ATTENTION;
}

/** Failed slots in a row (a slot's final attempt), with their attempts when retries added some. */
function failedSlots(task: TaskStatusJson): string {
  const attempts = task.consecutiveFailedAttempts;
  return attempts !== undefined && attempts !== task.consecutiveFailures
    ? `${task.consecutiveFailures} (${attempts} attempts)`
    : String(task.consecutiveFailures);
}

/** `cronwarden runs <task> [--limit N]`: the task's finished runs, newest slot first (the API's order). */
export async function runsCommand(
  task: string,
  options: AdminConnectionOptions & { limit?: string | undefined; json?: boolean | undefined },
  io: CliIo,
): Promise<number> {
  const limit = options.limit ?? "20";
  if (!/^\d+$/.test(limit) || Number(limit) < 1 || Number(limit) > 500)
    throw new CliError(`--limit ${limit} is invalid: use a whole number from 1 to 500`);
  const client = new AdminClient(options, io);
  const { body: runs } = await client.request(
    "GET",
    `/tasks/${encodeURIComponent(task)}/runs?limit=${limit}`,
    z.array(runRecordSchema),
  );
  if (options.json) {
    io.out(JSON.stringify(runs, null, 2));
    return 0;
  }
  for (const line of table(
    ["SCHEDULED", "STARTED", "DURATION", "OUTCOME", "TRIGGER", "ATTEMPT", "INSTANCE", "ERROR"],
    runs.map((run) => [
      time(run.scheduledAt),
      time(run.startedAt),
      duration(run.durationMs),
      run.outcome,
      run.requestedBy ? `${run.trigger ?? "manual"} by ${run.requestedBy}` : (run.trigger ?? "-"),
      run.attempt === null ? "-" : String(run.attempt),
      run.instanceId ?? "-",
      oneLine(run.error ?? run.detail ?? ""),
    ]),
  )) {
    io.out(line);
  }
  io.out(`${runs.length} run(s) of ${task}`);
  return 0;
}

/** `cronwarden run <task>`: queues a run now; exit 1 when refused (unknown, running, disabled). */
export async function runNowCommand(
  task: string,
  options: AdminConnectionOptions & { "with-downstream"?: boolean | undefined; json?: boolean | undefined },
  io: CliIo,
): Promise<number> {
  const client = new AdminClient(options, io);
  const query = options["with-downstream"] ? "?withDownstream=true" : "";
  const { body } = await client.request(
    "POST",
    `/tasks/${encodeURIComponent(task)}/run${query}`,
    runNowSchema,
  );
  if (options.json) {
    io.out(JSON.stringify(body, null, 2));
    return 0;
  }
  const by = body.requestedBy ? ` by ${body.requestedBy}` : "";
  const following = body.withDownstream ? ", with its downstream tasks" : "";
  io.out(`queued a run of ${body.task} (requested ${time(body.requestedAt)}${by}${following})`);
  return 0;
}

/** `cronwarden resume <task>`: resumes a task paused by failure; exit 1 when refused (unknown, not paused). */
export async function resumeCommand(
  task: string,
  options: AdminConnectionOptions & { json?: boolean | undefined },
  io: CliIo,
): Promise<number> {
  const client = new AdminClient(options, io);
  const { body } = await client.request("POST", `/tasks/${encodeURIComponent(task)}/resume`, resumeSchema);
  if (options.json) {
    io.out(JSON.stringify(body, null, 2));
    return 0;
  }
  io.out(
    `resumed ${body.task} (paused ${time(body.pausedByFailure.at)} after ${body.pausedByFailure.failures} failed slot(s)) by ${body.resumedBy}; next run ${time(body.nextRunAt)}, following its catchUp policy`,
  );
  return 0;
}

function enabledOf(task: TaskStatusJson): boolean | undefined {
  return task.job?.enabled ?? task.configured?.enabled;
}

/** Why a task needs attention, or undefined. */
export function needsAttention(task: TaskStatusJson): string | undefined {
  const pause = task.job?.pausedByFailure;
  if (pause) return `paused after ${pause.failures} failed slot(s)`;
  if (enabledOf(task) !== true) return undefined;
  if (task.missedSlot) return `missed slot ${time(task.missedSlot.scheduledAt)}`;
  if (task.lastOutcome === "failed") return "last run failed";
  return undefined;
}

function scheduleOf(task: TaskStatusJson): string {
  const cron = task.job?.cron ?? task.configured?.cron;
  if (!cron) return "-";
  const timezone = task.job?.timezone ?? task.configured?.timezone;
  return timezone ? `${cron} (${timezone})` : cron;
}

function noteOf(task: TaskStatusJson): string {
  const notes: string[] = [];
  if (!task.registered) notes.push("not registered in this code");
  const pause = task.job?.pausedByFailure;
  if (pause)
    notes.push(
      `paused by failure ${time(pause.at)} after ${pause.failures} failed slot(s)${pause.lastError ? `: ${oneLine(pause.lastError)}` : ""}; resume: cronwarden resume ${task.name}`,
    );
  if (task.missedSlot) notes.push(`missed ${time(task.missedSlot.scheduledAt)}: ${task.missedSlot.reason}`);
  if (task.lastOutcome === "failed" && task.lastError) notes.push(oneLine(task.lastError));
  return notes.join("; ") || "-";
}

function time(iso: string | null | undefined): string {
  return iso ? iso.replace(/\.\d{3}Z$/, "Z") : "-";
}

function duration(ms: number | null): string {
  if (ms === null) return "-";
  return ms < 1000 ? `${ms} ms` : `${(ms / 1000).toFixed(ms < 10_000 ? 2 : 1)} s`;
}

function oneLine(text: string, max = 80): string {
  const flat = text.replace(/\s+/g, " ").trim();
  return flat.length > max ? `${flat.slice(0, max - 1)}…` : flat;
}

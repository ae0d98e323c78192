import { z } from "zod";
import { AdminClient, type AdminConnectionOptions } from "./adminClient.js";
import { CliError, type CliIo, table } from "./common.js";
import { COMMANDS } from "./help.js";

/** The CLI side of docs/operations.md's "Pause all", "Instances" and "Search runs". */

const pauseSchema = z
  .object({ pausedAt: z.string(), pausedBy: z.string(), reason: z.string() })
  .passthrough()
  .nullable();
const switchSchema = z
  .object({
    paused: z.boolean(),
    changed: z.boolean(),
    pause: pauseSchema.optional(),
    lifted: pauseSchema.optional(),
  })
  .passthrough();
const instanceSchema = z
  .object({
    id: z.string(),
    host: z.string().nullable(),
    version: z.string().nullable(),
    startedAt: z.string().nullable(),
    lastSeenAt: z.string().nullable(),
    runsInProgress: z.number(),
    concurrency: z.number().nullable(),
    state: z.enum(["live", "dead"]),
    diedAt: z.string().optional(),
    handedOver: z.array(z.string()).optional(),
  })
  .passthrough();
const foundRunSchema = z
  .object({
    id: z.string(),
    task: z.string(),
    scheduledAt: z.string().nullable(),
    outcome: z.string(),
    recordedAt: z.string(),
    durationMs: z.number().nullable(),
    instanceId: z.string().nullable(),
    error: z.string().nullable(),
    detail: z.string().nullable(),
  })
  .passthrough();
const searchSchema = z.object({ runs: z.array(foundRunSchema), nextCursor: z.string().nullable() });

type Json = { json?: boolean | undefined };

/** `cronwarden pause-all --reason TEXT`: no run starts in the namespace until resume-all; audited. */
export async function pauseAllCommand(
  options: AdminConnectionOptions & Json & { reason?: string | undefined },
  io: CliIo,
): Promise<number> {
  if (!options.reason?.trim())
    throw new CliError(
      `pause-all needs --reason TEXT: say why (kept in the audit trail)\n${COMMANDS["pause-all"]?.usage}\n(cronwarden help pause-all for every option)`,
    );
  const client = new AdminClient(options, io);
  const { body } = await client.request("POST", "/pause-all", switchSchema, { reason: options.reason });
  if (options.json) io.out(JSON.stringify(body, null, 2));
  else
    io.out(
      body.changed
        ? `paused every task (by ${body.pause?.pausedBy ?? "?"}: ${body.pause?.reason ?? ""}); lift with cronwarden resume-all`
        : `already paused since ${body.pause?.pausedAt ?? "?"} by ${body.pause?.pausedBy ?? "?"}: ${body.pause?.reason ?? ""}`,
    );
  return 0;
}

/** `cronwarden resume-all [--reason TEXT]`: lifts pause-all; missed slots follow each task's catchUp. */
export async function resumeAllCommand(
  options: AdminConnectionOptions & Json & { reason?: string | undefined },
  io: CliIo,
): Promise<number> {
  const client = new AdminClient(options, io);
  const body = options.reason === undefined ? {} : { reason: options.reason };
  const { body: answer } = await client.request("POST", "/resume-all", switchSchema, body);
  if (options.json) io.out(JSON.stringify(answer, null, 2));
  else
    io.out(
      answer.changed
        ? `resumed every task (paused since ${answer.lifted?.pausedAt ?? "?"}); slots missed meanwhile follow each task's catchUp`
        : "pause-all was not on; nothing to resume",
    );
  return 0;
}

/** `cronwarden instances`: every instance, live or recently dead. */
export async function instancesCommand(options: AdminConnectionOptions & Json, io: CliIo): Promise<number> {
  const client = new AdminClient(options, io);
  const { body } = await client.request("GET", "/instances", z.array(instanceSchema));
  if (options.json) {
    io.out(JSON.stringify(body, null, 2));
    return 0;
  }
  for (const line of table(
    ["INSTANCE", "STATE", "HOST", "VERSION", "STARTED", "LAST SEEN", "RUNNING", "CONCURRENCY", "NOTE"],
    body.map((instance) => [
      instance.id,
      instance.state,
      instance.host || "-",
      instance.version || "-",
      time(instance.startedAt),
      time(instance.lastSeenAt),
      String(instance.runsInProgress),
      instance.concurrency === null ? "-" : String(instance.concurrency),
      instance.diedAt
        ? `died ${time(instance.diedAt)}${instance.handedOver?.length ? `; handed over: ${instance.handedOver.join(", ")}` : ""}`
        : "-",
    ]),
  ))
    io.out(line);
  const live = body.filter((instance) => instance.state === "live").length;
  io.out(`${live} live, ${body.length - live} dead`);
  return 0;
}

/** `cronwarden search [--task T] [--outcome o,p] [--from ISO] [--to ISO] [--text WORDS] [--limit N]`. */
export async function searchCommand(
  options: AdminConnectionOptions &
    Json & {
      task?: string | undefined;
      outcome?: string | undefined;
      from?: string | undefined;
      to?: string | undefined;
      text?: string | undefined;
      limit?: string | undefined;
    },
  io: CliIo,
): Promise<number> {
  const query = new URLSearchParams();
  if (options.task) query.set("task", options.task);
  if (options.outcome) query.set("outcome", options.outcome);
  if (options.from) query.set("from", options.from);
  if (options.to) query.set("to", options.to);
  if (options.text) query.set("q", options.text);
  query.set("limit", options.limit ?? "20");
  const client = new AdminClient(options, io);
  const { body } = await client.request("GET", `/runs/search?${query}`, searchSchema);
  if (options.json) {
    io.out(JSON.stringify(body, null, 2));
    return 0;
  }
  for (const line of table(
    ["RECORDED", "TASK", "SCHEDULED", "OUTCOME", "INSTANCE", "ERROR", "RUN"],
    body.runs.map((run) => [
      time(run.recordedAt),
      run.task,
      time(run.scheduledAt),
      run.outcome,
      run.instanceId ?? "-",
      oneLine(run.error ?? run.detail ?? "") || "-",
      run.id,
    ]),
  ))
    io.out(line);
  io.out(`${body.runs.length} run(s)${body.nextCursor ? " (more: raise --limit or narrow the search)" : ""}`);
  return 0;
}

function time(iso: string | null | undefined): string {
  return iso ? iso.replace(/\.\d{3}Z$/, "Z") : "-";
}

function oneLine(text: string, max = 80): string {
  const flat = text.replace(/\s+/g, " ").trim();
  return flat.length > max ? `${flat.slice(0, max - 1)}…` : flat;
}

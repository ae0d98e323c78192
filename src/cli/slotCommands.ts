import { z } from "zod";
import { AdminClient, type AdminConnectionOptions } from "./adminClient.js";
import { CliError, type CliIo, table } from "./common.js";

/** The CLI of the operator's actions on past slots (docs/operations.md, "Re-run a slot", "Backfill"). */

const isoDate = z.string().transform((text) => new Date(text));

const rerunSchema = z.looseObject({
  status: z.literal("queued"),
  taskName: z.string(),
  slot: isoDate,
  runKey: z.string(),
  requestedBy: z.string(),
  rerunOf: z.looseObject({ outcome: z.string() }),
});

const counts = z.looseObject({
  total: z.number(),
  pending: z.number(),
  running: z.number(),
  succeeded: z.number(),
  failed: z.number(),
  skipped: z.number(),
  cancelled: z.number(),
});

const backfillSchema = z.looseObject({
  id: z.string(),
  task: z.string(),
  from: isoDate,
  to: isoDate,
  mode: z.string(),
  concurrency: z.number(),
  state: z.string(),
  requestedBy: z.string(),
  createdAt: isoDate,
  slots: counts,
});

const dryRunSchema = z.looseObject({
  dryRun: z.literal(true),
  run: z.number(),
  skip: z.number(),
  slots: z.array(z.looseObject({ slot: isoDate, state: z.string(), detail: z.string().nullable() })),
});

type Json = { json?: boolean | undefined };

/** `cronwarden rerun <task> --slot TIME`: queues a re-run of that slot; exit 1 when refused. */
export async function rerunCommand(
  task: string,
  options: AdminConnectionOptions &
    Json & {
      slot?: string | undefined;
      force?: boolean | undefined;
      "with-downstream"?: boolean | undefined;
      reason?: string | undefined;
    },
  io: CliIo,
): Promise<number> {
  const slot = timeOption("--slot", options.slot);
  const client = new AdminClient(options, io);
  const { body } = await client.request(
    "POST",
    `/tasks/${encodeURIComponent(task)}/slots/${encodeURIComponent(slot)}/rerun`,
    rerunSchema,
    {
      force: options.force === true,
      withDownstream: options["with-downstream"] === true,
      reason: options.reason,
    },
  );
  if (options.json) {
    io.out(JSON.stringify(body, null, 2));
    return 0;
  }
  io.out(
    `queued a re-run of ${body.runKey} (its last run ${body.rerunOf.outcome}) by ${body.requestedBy}${options["with-downstream"] ? ", with its downstream tasks" : ""}`,
  );
  return 0;
}

/** `cronwarden backfill <task> --from --to`: creates a backfill, or with --dry-run lists its slots. */
export async function backfillCommand(
  task: string,
  options: AdminConnectionOptions &
    Json & {
      from?: string | undefined;
      to?: string | undefined;
      "only-missing"?: boolean | undefined;
      all?: boolean | undefined;
      concurrency?: string | undefined;
      "dry-run"?: boolean | undefined;
      "with-downstream"?: boolean | undefined;
      reason?: string | undefined;
    },
  io: CliIo,
): Promise<number> {
  const from = timeOption("--from", options.from);
  const to = timeOption("--to", options.to);
  const concurrency = options.concurrency === undefined ? undefined : Number(options.concurrency);
  if (concurrency !== undefined && (!Number.isInteger(concurrency) || concurrency < 1))
    throw new CliError(`--concurrency ${options.concurrency} is not a whole number of 1 or more`);
  const client = new AdminClient(options, io);
  const request = {
    from,
    to,
    mode: options.all ? "all" : "missing",
    ...(concurrency === undefined ? {} : { concurrency }),
    withDownstream: options["with-downstream"] === true,
    ...(options.reason ? { reason: options.reason } : {}),
  };
  const path = `/tasks/${encodeURIComponent(task)}/backfills`;
  if (options["dry-run"]) {
    const { body } = await client.request("POST", path, dryRunSchema, { ...request, dryRun: true });
    if (options.json) {
      io.out(JSON.stringify(body, null, 2));
      return 0;
    }
    for (const line of table(
      ["SLOT", "WOULD", "WHY"],
      body.slots.map((slot) => [
        slot.slot.toISOString(),
        slot.state === "pending" ? "run" : "skip",
        slot.detail ?? "",
      ]),
    ))
      io.out(line);
    io.out(`${body.run} slot(s) of ${task} would run, ${body.skip} skipped (dry run: nothing was started)`);
    return 0;
  }
  const { body } = await client.request("POST", path, backfillSchema, request);
  if (options.json) {
    io.out(JSON.stringify(body, null, 2));
    return 0;
  }
  io.out(
    `backfill ${body.id} of ${task}: ${body.slots.pending} slot(s) to run, ${body.slots.skipped} skipped, at most ${body.concurrency} at a time (cronwarden backfill-status ${body.id})`,
  );
  return 0;
}

/** `cronwarden backfills [--task T]`: the recent backfills with their progress. */
export async function backfillsCommand(
  options: AdminConnectionOptions & Json & { task?: string | undefined },
  io: CliIo,
): Promise<number> {
  const client = new AdminClient(options, io);
  const query = options.task ? `?task=${encodeURIComponent(options.task)}` : "";
  const { body } = await client.request("GET", `/backfills${query}`, z.array(backfillSchema));
  if (options.json) {
    io.out(JSON.stringify(body, null, 2));
    return 0;
  }
  for (const line of table(
    ["ID", "TASK", "STATE", "PROGRESS", "FROM", "TO", "BY"],
    body.map((backfill) => [
      backfill.id,
      backfill.task,
      backfill.state,
      progressText(backfill.slots),
      backfill.from.toISOString(),
      backfill.to.toISOString(),
      backfill.requestedBy,
    ]),
  ))
    io.out(line);
  io.out(`${body.length} backfill(s)`);
  return 0;
}

/** `cronwarden backfill-status <id>`: one backfill's progress. */
export async function backfillStatusCommand(
  id: string,
  options: AdminConnectionOptions & Json,
  io: CliIo,
): Promise<number> {
  const client = new AdminClient(options, io);
  const { body } = await client.request("GET", `/backfills/${encodeURIComponent(id)}`, backfillSchema);
  if (options.json) {
    io.out(JSON.stringify(body, null, 2));
    return 0;
  }
  io.out(`backfill ${body.id} of ${body.task}: ${body.state}, ${progressText(body.slots)}`);
  return 0;
}

/** `cronwarden backfill-cancel <id>`: its pending slots are not run; exit 1 when it is not running. */
export async function backfillCancelCommand(
  id: string,
  options: AdminConnectionOptions & Json & { reason?: string | undefined },
  io: CliIo,
): Promise<number> {
  const client = new AdminClient(options, io);
  const { body } = await client.request(
    "POST",
    `/backfills/${encodeURIComponent(id)}/cancel`,
    backfillSchema,
    options.reason ? { reason: options.reason } : {},
  );
  if (options.json) {
    io.out(JSON.stringify(body, null, 2));
    return 0;
  }
  io.out(`cancelled backfill ${body.id} of ${body.task}: ${progressText(body.slots)}`);
  return 0;
}

function progressText(slots: z.output<typeof counts>): string {
  const done = slots.succeeded + slots.failed + slots.skipped + slots.cancelled;
  return `${done}/${slots.total} done (${slots.succeeded} succeeded, ${slots.failed} failed, ${slots.skipped} skipped, ${slots.cancelled} cancelled, ${slots.running} running)`;
}

function timeOption(flag: string, value: string | undefined): string {
  if (value === undefined)
    throw new CliError(`${flag} is required: an ISO 8601 time, e.g. 2026-03-03T09:00:00Z`);
  const time = new Date(value);
  if (Number.isNaN(time.getTime()))
    throw new CliError(`${flag} ${value} is not an ISO 8601 time (e.g. 2026-03-03T09:00:00Z)`);
  return time.toISOString();
}

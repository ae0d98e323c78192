import { z } from "zod";
import { AdminClient, type AdminConnectionOptions } from "./adminClient.js";
import { CliError, type CliIo, table } from "./common.js";

/** `cronwarden shards <task> --slot TIME`: a sharded slot's shards (docs/sharding.md, "Seeing it"). */

const time = z.string().nullable();
const shardsSchema = z.looseObject({
  task: z.string(),
  scheduledAt: z.string(),
  round: z.number(),
  shardCount: z.number(),
  coordinator: z.string().nullable(),
  reduce: z.looseObject({ state: z.string(), runs: z.number(), error: z.string().nullable() }),
  outcome: z.string().nullable(),
  detail: z.string().nullable(),
  counts: z.record(z.string(), z.number()),
  shards: z.array(
    z.looseObject({
      index: z.number(),
      state: z.string(),
      instance: z.string().nullable(),
      attempts: z.number(),
      startedAt: time,
      durationMs: z.number().nullable(),
      error: z.string().nullable(),
    }),
  ),
});

export async function shardsCommand(
  task: string,
  options: AdminConnectionOptions & {
    json?: boolean | undefined;
    slot?: string | undefined;
    round?: string | undefined;
  },
  io: CliIo,
): Promise<number> {
  if (!options.slot || Number.isNaN(Date.parse(options.slot)))
    throw new CliError(
      `--slot needs the slot's time, ISO 8601 (got ${JSON.stringify(options.slot ?? null)})`,
      2,
    );
  const slot = new Date(options.slot).toISOString();
  const query = options.round ? `?round=${encodeURIComponent(options.round)}` : "";
  const client = new AdminClient(options, io);
  const { body } = await client.request(
    "GET",
    `/tasks/${encodeURIComponent(task)}/slots/${encodeURIComponent(slot)}/shards${query}`,
    shardsSchema,
  );
  if (options.json) {
    io.out(JSON.stringify(body, null, 2));
    return 0;
  }
  const counts = Object.entries(body.counts)
    .map(([state, count]) => `${count} ${state}`)
    .join(", ");
  io.out(
    `${body.task} @ ${body.scheduledAt} (round ${body.round}): ${body.shardCount} shard(s): ${counts}; reduce ${body.reduce.state}${body.reduce.runs > 1 ? ` (started ${body.reduce.runs} times)` : ""}; coordinator ${body.coordinator ?? "-"}`,
  );
  if (body.outcome) io.out(`outcome: ${body.outcome}: ${body.detail ?? ""}`);
  const rows = body.shards.map((shard) => [
    String(shard.index),
    shard.state,
    shard.instance ?? "-",
    String(shard.attempts),
    shard.durationMs === null ? "-" : `${shard.durationMs} ms`,
    shard.error ?? "",
  ]);
  for (const line of table(["SHARD", "STATE", "INSTANCE", "ATTEMPTS", "DURATION", "ERROR"], rows))
    io.out(line);
  return 0;
}

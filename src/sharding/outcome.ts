/**
 * A sharded slot's outcome, derived from its shards and its reduce (docs/sharding.md, "Outcome").
 * Pure: the coordinator (src/sharding/slotCoordinator.ts) returns it as the slot run's own outcome,
 * so that pauseOnFailure, alerts and metrics count the slot once, not once per shard.
 */

export type ShardOutcome = "succeeded" | "failed" | "skipped";
export type ReduceState = "none" | "waiting" | "running" | "succeeded" | "failed";

export interface EndedShard {
  index: number;
  outcome: ShardOutcome;
  /** The error of a failed shard (its last attempt's). */
  error?: string | null;
}

export interface SlotOutcome {
  outcome: "succeeded" | "failed";
  /** One line for the run record and the log: what failed, what was skipped. */
  detail: string;
}

/** How many failed shards a slot's detail names one by one; the rest are counted. */
export const NAMED_SHARDS = 10;

/** The slot's outcome: failed when a shard or the reduce failed, else succeeded (noting skipped shards). */
export function deriveSlotOutcome(
  shards: readonly EndedShard[],
  reduce: { state: ReduceState; error?: string | null },
): SlotOutcome {
  const count = shards.length;
  const failed = shards.filter((shard) => shard.outcome === "failed").sort((a, b) => a.index - b.index);
  const skipped = shards.filter((shard) => shard.outcome === "skipped").length;
  const parts: string[] = [];
  if (failed.length > 0) {
    const named = failed.slice(0, NAMED_SHARDS).map((shard) => shard.index);
    const more = failed.length > named.length ? ` and ${failed.length - named.length} more` : "";
    const first = failed[0]?.error ? `; shard ${failed[0].index}: ${failed[0].error}` : "";
    parts.push(`${failed.length} of ${count} shard(s) failed (${named.join(", ")}${more})${first}`);
  }
  if (reduce.state === "failed") parts.push(`the reduce failed: ${reduce.error ?? "(no message)"}`);
  if (parts.length > 0) {
    if (skipped > 0) parts.push(`${skipped} skipped`);
    return { outcome: "failed", detail: parts.join("; ") };
  }
  const done = reduce.state === "succeeded" ? "; the reduce succeeded" : "";
  if (skipped > 0)
    return {
      outcome: "succeeded",
      detail: `partly skipped: ${count - skipped} of ${count} shard(s) succeeded, ${skipped} skipped${done}`,
    };
  return { outcome: "succeeded", detail: `${count} of ${count} shard(s) succeeded${done}` };
}

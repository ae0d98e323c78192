import type { EntryProblem } from "./desiredState.js";

/**
 * The shard fields of a config entry (docs/sharding.md, "Declaring shards"): `shards` (a whole
 * number from 1 to MAX_ENTRY_SHARDS) and `shardParameters` (a list of exactly `shards` values, or a
 * map from shard index to value, as ElasticJob's `0=Beijing,1=Shanghai`). A change applies from
 * the next slot: a slot in progress keeps the shards it stored (src/sharding/slotCoordinator.ts).
 */

export interface ShardFields {
  shards?: number;
  shardParameters?: unknown[] | Record<string, unknown>;
}

/** The most shards an entry may declare (each is a row per slot). */
export const MAX_ENTRY_SHARDS = 10_000;

export function checkShardFields(entry: Record<string, unknown>): {
  fields: ShardFields;
  problems: EntryProblem[];
} {
  const problems: EntryProblem[] = [];
  const { shards, shardParameters } = entry;
  if (shards === undefined) {
    if (shardParameters !== undefined)
      problems.push({
        field: "shardParameters",
        value: shardParameters,
        reason: "needs `shards` (the number of shards) beside it",
      });
    return { fields: {}, problems };
  }
  if (typeof shards !== "number" || !Number.isInteger(shards) || shards < 1 || shards > MAX_ENTRY_SHARDS) {
    problems.push({
      field: "shards",
      value: shards,
      reason: `must be a whole number from 1 to ${MAX_ENTRY_SHARDS}`,
    });
    return { fields: {}, problems };
  }
  if (shardParameters === undefined) return { fields: { shards }, problems };
  if (Array.isArray(shardParameters)) {
    if (shardParameters.length !== shards)
      problems.push({
        field: "shardParameters",
        value: shardParameters,
        reason: `has ${shardParameters.length} value(s) for ${shards} shard(s): give one per shard, or a map from shard index to value`,
      });
    return problems.length > 0 ? { fields: {}, problems } : { fields: { shards, shardParameters }, problems };
  }
  if (typeof shardParameters !== "object" || shardParameters === null) {
    problems.push({
      field: "shardParameters",
      value: shardParameters,
      reason: "must be a list (one value per shard) or a map from shard index to value",
    });
    return { fields: {}, problems };
  }
  const wrong = Object.keys(shardParameters).filter(
    (key) => !/^(0|[1-9]\d*)$/.test(key) || Number(key) >= shards,
  );
  if (wrong.length > 0) {
    problems.push({
      field: "shardParameters",
      value: shardParameters,
      reason: `key(s) ${wrong.slice(0, 5).join(", ")} are not shard indexes: use 0 to ${shards - 1}`,
    });
    return { fields: {}, problems };
  }
  return { fields: { shards, shardParameters: shardParameters as Record<string, unknown> }, problems };
}

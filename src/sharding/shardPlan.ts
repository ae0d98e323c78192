import { CronwardenError } from "../core/errors.js";

/**
 * What a sharded slot is split into (docs/sharding.md, "Declaring shards"), and the size limits of
 * what shards carry: a static count with optional parameters from the config entry, or the items a
 * registered `map(ctx)` returns for the slot. Pure.
 */

/** The most shards a config entry may declare. */
export const MAX_STATIC_SHARDS = 10_000;
/** The most items a map may return for one slot: each is a row (docs/sharding.md, "Limits"). */
export const MAX_MAP_ITEMS = 100_000;
/**
 * The largest JSON of one map item, one shard's returned value or a reduce's: they are stored in
 * the shard rows and all read at once for the reduce; large output belongs in the task's own store.
 */
export const MAX_SHARD_VALUE_BYTES = 16_384;

/** The config's declaration of a static sharded task (src/config/shardConfig.ts). */
export interface StaticShards {
  count: number;
  /** One value per shard: a list (index i is shard i's) or a map from index to value. */
  parameters?: readonly unknown[] | Readonly<Record<string, unknown>>;
}

/** Shard i's parameter of a static declaration (null where none is given). */
export function staticParameters(shards: StaticShards): unknown[] {
  const { count, parameters } = shards;
  return Array.from({ length: count }, (_, index) => {
    if (parameters === undefined) return null;
    const value = Array.isArray(parameters)
      ? parameters[index]
      : (parameters as Record<string, unknown>)[String(index)];
    return value === undefined ? null : value;
  });
}

/**
 * A value as the JSON a shard row stores, or a CronwardenError SHARD_VALUE_INVALID naming `what`,
 * the size and the fix. `undefined` is stored as null.
 */
export function storedJson(what: string, value: unknown): string {
  let text: string | undefined;
  try {
    text = JSON.stringify(value === undefined ? null : value);
  } catch (error) {
    throw new CronwardenError(
      "SHARD_VALUE_INVALID",
      `${what} is not JSON (${(error as Error).message}): return plain data (numbers, strings, lists, objects)`,
      { cause: error },
    );
  }
  const stored = text ?? "null";
  const bytes = Buffer.byteLength(stored, "utf8");
  if (bytes > MAX_SHARD_VALUE_BYTES)
    throw new CronwardenError(
      "SHARD_VALUE_INVALID",
      `${what} is ${bytes} bytes of JSON, over the limit of ${MAX_SHARD_VALUE_BYTES}: return a small summary (counts, ids) and keep large output in your own store`,
    );
  return stored;
}

/** The items a map returned, checked: a list of at most MAX_MAP_ITEMS JSON values, each within the size limit. */
export function mapItems(taskName: string, items: unknown): string[] {
  if (!Array.isArray(items))
    throw new CronwardenError(
      "SHARD_VALUE_INVALID",
      `the map of task "${taskName}" returned ${items === null ? "null" : typeof items}, not a list: return one item per shard (an empty list runs no shard)`,
    );
  if (items.length > MAX_MAP_ITEMS)
    throw new CronwardenError(
      "SHARD_VALUE_INVALID",
      `the map of task "${taskName}" returned ${items.length} items, over the limit of ${MAX_MAP_ITEMS} per slot: group them (a shard may take a batch of ids)`,
    );
  return items.map((item, index) => storedJson(`item ${index} of the map of task "${taskName}"`, item));
}

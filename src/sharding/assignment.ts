/**
 * Which instance a shard belongs to (docs/sharding.md, "Balancing"): rendezvous hashing (highest
 * random weight) of the task and the shard's index over the live instances, with bounded loads.
 * Pure: the coordinator calls it with the instances registered when it creates a slot's shards
 * (src/sharding/slotCoordinator.ts).
 *
 * - Stable: the same task, index and fleet give the same instance, so shard i of a task runs on
 *   the same instance slot after slot (its caches stay warm).
 * - Few moves: each shard ranks the instances by a hash of (task, index, instance); an instance
 *   that leaves only moves the shards it held (about 1/n), one that joins only takes those that now
 *   rank it first (about 1/(n + 1)). A jump consistent hash moves as few only when the last bucket
 *   goes; an instance leaving from the middle of a sorted list shifted most shards.
 * - Bounded: no instance is given more than LOAD_BOUND times its even share (a shard whose first
 *   choice is full takes its next), so that 200 shards on 3 instances never put 42 % on one, as a
 *   plain hash did for some task names.
 */

/** An instance is given at most this many times its even share of a slot's shards. */
export const LOAD_BOUND = 1.1;

/** FNV-1a over the text's UTF-16 units, 32 bits. */
function fnv1a(text: string): number {
  let hash = 0x811c9dc5;
  for (let index = 0; index < text.length; index++) {
    hash ^= text.charCodeAt(index);
    hash = Math.imul(hash, 0x01000193) >>> 0;
  }
  return hash;
}

/** MurmurHash3's 32-bit finaliser: neighbouring inputs become unrelated outputs. */
function fmix32(value: number): number {
  let h = value >>> 0;
  h = Math.imul(h ^ (h >>> 16), 0x85ebca6b);
  h = Math.imul(h ^ (h >>> 13), 0xc2b2ae35);
  return (h ^ (h >>> 16)) >>> 0;
}

/** The weight of an instance for one shard: the shard goes to the highest it can. */
export function shardWeight(taskSeed: number, index: number, instanceSeed: number): number {
  return fmix32(Math.imul(fmix32(taskSeed ^ fmix32(index + 0x9e3779b9)), 0x27d4eb2f) ^ instanceSeed);
}

/**
 * The instance each shard of a slot is assigned to: entry i is shard i's instance id. No live
 * instance: every entry is undefined (any instance takes them: src/sharding/shardSql.ts).
 */
export function assignShards(
  taskName: string,
  count: number,
  liveInstances: readonly string[],
): (string | undefined)[] {
  const instances = [...new Set(liveInstances)].sort();
  if (instances.length === 0) return Array.from({ length: count }, () => undefined);
  const taskSeed = fnv1a(taskName);
  const seeds = instances.map((id) => fmix32(fnv1a(id)));
  const cap = Math.ceil((count / instances.length) * LOAD_BOUND);
  const loads = instances.map(() => 0);
  const assigned: string[] = [];
  for (let index = 0; index < count; index++) {
    let best = -1;
    let bestWeight = -1;
    for (let at = 0; at < instances.length; at++) {
      if ((loads[at] as number) >= cap) continue;
      const weight = shardWeight(taskSeed, index, seeds[at] as number);
      if (weight > bestWeight) {
        best = at;
        bestWeight = weight;
      }
    }
    loads[best] = (loads[best] as number) + 1;
    assigned.push(instances[best] as string);
  }
  return assigned;
}

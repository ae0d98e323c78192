import { describe, expect, it } from "vitest";
import { checkShardFields } from "../../src/config/shardConfig.js";
import { assignShards, LOAD_BOUND } from "../../src/sharding/assignment.js";
import { deriveSlotOutcome } from "../../src/sharding/outcome.js";
import { mapItems, staticParameters, storedJson } from "../../src/sharding/shardPlan.js";

/** The pure parts of sharded tasks (docs/sharding.md): assignment, the slot's outcome, the limits, the config fields. */

const fleet = (n: number) => Array.from({ length: n }, (_, index) => `instance-${index + 1}`);
const counts = (assigned: (string | undefined)[]) => {
  const byInstance = new Map<string, number>();
  for (const id of assigned) byInstance.set(String(id), (byInstance.get(String(id)) ?? 0) + 1);
  return byInstance;
};
const moved = (before: (string | undefined)[], after: (string | undefined)[]) =>
  before.filter((id, index) => id !== after[index]).length;

describe("assignShards", () => {
  it("is stable: the same task, count and fleet give the same instance per shard, in any order of the fleet", () => {
    const first = assignShards("tenant-sync", 1000, ["c", "a", "b"]);
    expect(assignShards("tenant-sync", 1000, ["a", "b", "c"])).toEqual(first);
    expect(assignShards("tenant-sync", 1000, ["b", "c", "a", "a"])).toEqual(first);
  });

  it("gives no instance more than its bounded share (1,000 and 200 shards on 3 instances: under 40 %)", () => {
    for (const task of ["tenant-sync", "sharded", "bill-accounts", "x"]) {
      for (const count of [200, 1000]) {
        const max = Math.max(...counts(assignShards(task, count, fleet(3))).values());
        expect(max).toBeLessThanOrEqual(Math.ceil((count / 3) * LOAD_BOUND));
        expect(max / count).toBeLessThan(0.4);
      }
    }
  });

  it("moves at most 35 % of 1,000 shards when any one of 4 instances stops, and about a fifth when a fifth joins", () => {
    const four = fleet(4);
    const before = assignShards("tenant-sync", 1000, four);
    for (const gone of four) {
      const after = assignShards(
        "tenant-sync",
        1000,
        four.filter((id) => id !== gone),
      );
      expect(moved(before, after)).toBeLessThanOrEqual(350);
      // the shards of the instances that stayed mostly stay
      expect(after.filter((id) => id === gone)).toEqual([]);
    }
    expect(moved(before, assignShards("tenant-sync", 1000, fleet(5)))).toBeLessThanOrEqual(300);
  });

  it("leaves shards unassigned (anyone's) when no instance is registered", () => {
    expect(assignShards("t", 3, [])).toEqual([undefined, undefined, undefined]);
  });
});

describe("deriveSlotOutcome", () => {
  it("succeeds when every shard and the reduce succeeded", () => {
    expect(
      deriveSlotOutcome(
        [
          { index: 0, outcome: "succeeded" },
          { index: 1, outcome: "succeeded" },
        ],
        { state: "succeeded" },
      ),
    ).toEqual({ outcome: "succeeded", detail: "2 of 2 shard(s) succeeded; the reduce succeeded" });
  });

  it("fails naming the failed shards (the first ten, then a count) and the first error", () => {
    const shards = Array.from({ length: 20 }, (_, index) => ({
      index,
      outcome: index % 5 === 0 || index > 14 ? ("failed" as const) : ("succeeded" as const),
      error: `boom ${index}`,
    }));
    expect(deriveSlotOutcome(shards, { state: "none" })).toEqual({
      outcome: "failed",
      detail: "8 of 20 shard(s) failed (0, 5, 10, 15, 16, 17, 18, 19); shard 0: boom 0",
    });
    const many = Array.from({ length: 12 }, (_, index) => ({ index, outcome: "failed" as const }));
    expect(deriveSlotOutcome(many, { state: "none" }).detail).toBe(
      "12 of 12 shard(s) failed (0, 1, 2, 3, 4, 5, 6, 7, 8, 9 and 2 more)",
    );
  });

  it("fails when the reduce failed, even with every shard succeeded", () => {
    expect(
      deriveSlotOutcome([{ index: 0, outcome: "succeeded" }], { state: "failed", error: "sum mismatch" }),
    ).toEqual({
      outcome: "failed",
      detail: "the reduce failed: sum mismatch",
    });
  });

  it("is partly skipped (succeeded) when some shards were skipped and none failed", () => {
    expect(
      deriveSlotOutcome(
        [
          { index: 0, outcome: "succeeded" },
          { index: 1, outcome: "skipped" },
          { index: 2, outcome: "succeeded" },
        ],
        { state: "none" },
      ),
    ).toEqual({ outcome: "succeeded", detail: "partly skipped: 2 of 3 shard(s) succeeded, 1 skipped" });
  });

  it("succeeds for a map that returned no item", () => {
    expect(deriveSlotOutcome([], { state: "succeeded" }).outcome).toBe("succeeded");
  });
});

describe("shard values and parameters", () => {
  it("stores each static shard's parameter from a list or a map, null where none is given", () => {
    expect(staticParameters({ count: 3 })).toEqual([null, null, null]);
    expect(staticParameters({ count: 3, parameters: ["Beijing", "Shanghai", "Guangzhou"] })).toEqual([
      "Beijing",
      "Shanghai",
      "Guangzhou",
    ]);
    expect(staticParameters({ count: 3, parameters: { "0": "Beijing", "2": "Guangzhou" } })).toEqual([
      "Beijing",
      null,
      "Guangzhou",
    ]);
  });

  it("refuses a value over 16 KB of JSON, or not JSON, naming it and the fix", () => {
    expect(storedJson("shard 3's value", { ok: 1 })).toBe('{"ok":1}');
    expect(storedJson("v", undefined)).toBe("null");
    expect(() => storedJson("the value shard 3 returned", "x".repeat(20_000))).toThrow(
      /the value shard 3 returned is 20002 bytes of JSON, over the limit of 16384: return a small summary/,
    );
    expect(() => storedJson("v", 10n)).toThrow(/v is not JSON/);
  });

  it("refuses a map result that is not a list, or too long", () => {
    expect(mapItems("sync", ["a", 1])).toEqual(['"a"', "1"]);
    expect(() => mapItems("sync", { a: 1 })).toThrow(/the map of task "sync" returned object, not a list/);
    expect(() => mapItems("sync", new Array(100_001).fill(0))).toThrow(
      /100001 items, over the limit of 100000/,
    );
  });
});

describe("checkShardFields", () => {
  it("accepts shards with a list or a map of parameters", () => {
    expect(checkShardFields({ shards: 2, shardParameters: ["a", "b"] })).toEqual({
      fields: { shards: 2, shardParameters: ["a", "b"] },
      problems: [],
    });
    expect(
      checkShardFields({ shards: 3, shardParameters: { "0": "Beijing", "1": "Shanghai" } }).problems,
    ).toEqual([]);
    expect(checkShardFields({})).toEqual({ fields: {}, problems: [] });
  });

  it("refuses bad values with the field, the value and the reason", () => {
    expect(checkShardFields({ shards: 0 }).problems).toEqual([
      { field: "shards", value: 0, reason: "must be a whole number from 1 to 10000" },
    ]);
    expect(checkShardFields({ shards: 10_001 }).problems[0]?.field).toBe("shards");
    expect(checkShardFields({ shards: "4" }).problems[0]?.field).toBe("shards");
    expect(checkShardFields({ shards: 3, shardParameters: ["a"] }).problems).toEqual([
      {
        field: "shardParameters",
        value: ["a"],
        reason: "has 1 value(s) for 3 shard(s): give one per shard, or a map from shard index to value",
      },
    ]);
    expect(checkShardFields({ shards: 2, shardParameters: { "2": "x", a: "y" } }).problems[0]?.reason).toBe(
      "key(s) 2, a are not shard indexes: use 0 to 1",
    );
    expect(checkShardFields({ shardParameters: ["a"] }).problems[0]?.reason).toMatch(/needs `shards`/);
    expect(checkShardFields({ shards: 2, shardParameters: "a,b" }).problems[0]?.field).toBe(
      "shardParameters",
    );
  });
});

import { describe, expect, it } from "vitest";
import type { LogRow, ProcessRecord } from "../../chaos/lib/check.js";
import {
  checkShards,
  type ShardCheckInput,
  type ShardExecution,
  type ShardRowRecord,
  type ShardSlotRow,
} from "../../chaos/lib/shardCheck.js";

/** The chaos run's shard check (chaos/lib/shardCheck.ts) on hand-made records: each invariant can fail. */

const T0 = Date.parse("2030-01-01T00:00:00.000Z");
const s = (seconds: number) => T0 + seconds * 1000;
const TASK = "chaos-sharded";

const process = (
  instance: string,
  end: ProcessRecord["end"] = "stopped",
  endedAt = s(100),
): ProcessRecord => ({
  label: instance.split(":")[0] as string,
  pid: Number(instance.split(":")[1]),
  instance,
  spawnedAt: s(-5),
  readyAt: s(-2),
  endedAt,
  end,
  code: end === "stopped" ? 0 : null,
  signal: end === "killed" ? "SIGKILL" : null,
});
const slot = (extra: Partial<ShardSlotRow> = {}): ShardSlotRow => ({
  task: TASK,
  slot: s(0),
  round: 1,
  shardCount: 2,
  reduceState: "succeeded",
  reduceRuns: 1,
  reduceHolder: "i1:1",
  outcome: "succeeded",
  detail: null,
  ...extra,
});
const shard = (index: number, extra: Partial<ShardRowRecord> = {}): ShardRowRecord => ({
  task: TASK,
  slot: s(0),
  round: 1,
  index,
  state: "succeeded",
  holder: "i1:1",
  runs: 1,
  error: null,
  ...extra,
});
const execution = (
  index: number,
  instance = "i1:1",
  extra: Partial<ShardExecution> = {},
): ShardExecution => ({
  task: TASK,
  slot: s(0),
  index,
  instance,
  startedAt: s(1),
  finishedAt: s(2),
  error: null,
  ...extra,
});
const input = (extra: Partial<ShardCheckInput> = {}): ShardCheckInput => ({
  slots: [slot()],
  shards: [shard(0), shard(1)],
  executions: [execution(0), execution(1), execution(-1, "i1:1", { startedAt: s(3), finishedAt: s(3) })],
  logRows: [],
  processes: [process("i1:1"), process("i2:2")],
  pgDown: [],
  tasks: [TASK],
  ...extra,
});
const invariants = (verdict: ReturnType<typeof checkShards>) => verdict.violations.map((v) => v.invariant);

describe("checkShards", () => {
  it("passes a slot whose shards succeeded once each and whose reduce ran once", () => {
    const verdict = checkShards(input());
    expect(verdict.violations).toEqual([]);
    expect(verdict.figures).toMatchObject({
      shardedSlotsEnded: 1,
      shardsChecked: 2,
      shardReturnsRepeated: 0,
    });
  });

  it("fails an ended slot with a shard still running, or a failed shard in a succeeded slot", () => {
    expect(invariants(checkShards(input({ shards: [shard(0), shard(1, { state: "running" })] })))).toEqual([
      "sharded slots ended with shards not ended (or missing)",
    ]);
    const failed = checkShards(
      input({
        shards: [shard(0), shard(1, { state: "failed", error: "boom" })],
        executions: input().executions.map((run) => (run.index === 1 ? { ...run, error: "boom" } : run)),
      }),
    );
    expect(invariants(failed)).toEqual(["sharded slots succeeded with failed shards"]);
    expect(failed.notes[0]?.what).toMatch(/accounted for/);
  });

  it("fails a shard whose handler returned on two live instances, allows it when the first was killed", () => {
    const twice = [...input().executions, execution(1, "i2:2", { startedAt: s(3), finishedAt: s(4) })];
    expect(invariants(checkShards(input({ executions: twice })))).toEqual([
      "shards succeeded twice (a second handler return not explained by a kill or an outage)",
    ]);
    const afterKill = checkShards(
      input({
        executions: [
          execution(0),
          execution(1, "i2:2", { finishedAt: s(1.5) }),
          execution(1, "i1:1", { startedAt: s(5), finishedAt: s(6) }),
          execution(-1, "i1:1", { startedAt: s(7), finishedAt: s(7) }),
        ],
        shards: [shard(0), shard(1, { runs: 2 })],
        processes: [process("i1:1"), process("i2:2", "killed", s(1.6))],
      }),
    );
    expect(afterKill.violations).toEqual([]);
    expect(afterKill.figures).toMatchObject({ shardReturnsRepeated: 1, shardsReclaimed: 1 });
  });

  it("fails a shard run on two instances at once, and a success with no return on its holder", () => {
    const overlap = [...input().executions, execution(1, "i2:2", { startedAt: s(1.5), finishedAt: null })];
    expect(invariants(checkShards(input({ executions: overlap })))).toEqual([
      "shards running on two instances at once",
    ]);
    const unbacked = input().executions.filter((run) => run.index !== 1);
    expect(invariants(checkShards(input({ executions: unbacked })))).toEqual([
      "shards recorded succeeded without their holder's handler returning",
    ]);
  });

  it("fails a slot without exactly one reduce, and a failed slot run its shards do not explain", () => {
    const noReduce = input().executions.filter((run) => run.index !== -1);
    expect(invariants(checkShards(input({ executions: noReduce })))).toEqual([
      "ended sharded slots without exactly one reduce",
    ]);
    const twoReduces = [...input().executions, execution(-1, "i2:2", { startedAt: s(3), finishedAt: s(3) })];
    expect(invariants(checkShards(input({ executions: twoReduces })))).toEqual([
      "ended sharded slots without exactly one reduce",
    ]);
    const fail: LogRow = {
      task: TASK,
      event: "fail",
      timestamp: s(5),
      slot: s(0),
      instance: "i1:1",
      outcome: "failed",
      rerun: false,
      duplicateOf: false,
      error: "Connection terminated",
    };
    expect(invariants(checkShards(input({ logRows: [fail] })))).toEqual([
      "sharded slot runs failed outside their shards and reduce",
    ]);
    expect(checkShards(input({ logRows: [fail], slots: [slot({ outcome: "failed" })] })).violations).toEqual(
      [],
    );
  });
});

/**
 * The chaos run's check of its sharded task (docs/sharding.md, "Guarantees"), from the record:
 * the slot and shard rows (`cronwarden_shard_slots`, `cronwarden_shards`), the run log's `fail`
 * rows of the task, and the instances' shard journals (each shard's and reduce's start and end,
 * written by chaos/instance.ts). Pure, like chaos/lib/check.ts.
 *
 * Every shard of every ended slot ended (succeeded, or failed with its error: accounted for), and
 * succeeded at most once: a handler that returned on an instance other than the one recorded is
 * allowed only when that instance was killed, or the return fell in a database outage (its end
 * could not be written, and the shard ran again: at least once). No shard ran on two instances at
 * once. One reduce per ended slot, with the same exception. A failed slot run of the task is a
 * slot whose derived outcome is failed (its shards or reduce), not a coordinator's own error.
 */
import type { LogRow, ProcessRecord } from "./check.js";

export interface ShardExecution {
  task: string;
  slot: number;
  /** -1: the reduce. */
  index: number;
  instance: string;
  startedAt: number;
  finishedAt: number | null;
  error: string | null;
}

export interface ShardSlotRow {
  task: string;
  slot: number;
  round: number;
  shardCount: number;
  reduceState: string;
  reduceRuns: number;
  reduceHolder: string | null;
  outcome: string | null;
  detail: string | null;
}

export interface ShardRowRecord {
  task: string;
  slot: number;
  round: number;
  index: number;
  state: string;
  holder: string | null;
  runs: number;
  error: string | null;
}

export interface ShardCheckInput {
  slots: ShardSlotRow[];
  shards: ShardRowRecord[];
  executions: ShardExecution[];
  logRows: LogRow[];
  processes: ProcessRecord[];
  pgDown: Array<{ from: number; to: number }>;
  /** The sharded tasks of the run (with a reduce). */
  tasks: string[];
}

export interface ShardFigures {
  shardedSlotsEnded: number;
  shardedSlotsOpen: number;
  shardsChecked: number;
  shardsFailed: number;
  shardsReclaimed: number;
  shardReturnsRepeated: number;
  reduceRepeated: number;
}

export interface ShardVerdict {
  figures: ShardFigures;
  violations: Array<{ invariant: string; count: number; examples: string[] }>;
  notes: Array<{ what: string; count: number; examples: string[] }>;
}

const iso = (ms: number) => new Date(ms).toISOString();
/** A return this close to an outage may not have had its end written. */
const OUTAGE_MARGIN_MS = 2_000;

export function checkShards(input: ShardCheckInput): ShardVerdict {
  const violations: ShardVerdict["violations"] = [];
  const notes: ShardVerdict["notes"] = [];
  const violate = (invariant: string, examples: string[]) => {
    if (examples.length > 0)
      violations.push({ invariant, count: examples.length, examples: examples.slice(0, 5) });
  };
  const note = (what: string, examples: string[]) => {
    if (examples.length > 0) notes.push({ what, count: examples.length, examples: examples.slice(0, 5) });
  };
  const processOf = new Map(input.processes.map((process) => [process.instance, process]));
  const killed = (instance: string) => {
    const end = processOf.get(instance)?.end;
    return end === "killed" || end === "crashed";
  };
  const nearOutage = (at: number) =>
    input.pgDown.some((down) => at >= down.from - OUTAGE_MARGIN_MS && at <= down.to + OUTAGE_MARGIN_MS);
  const endOf = (run: ShardExecution) =>
    run.finishedAt ?? processOf.get(run.instance)?.endedAt ?? Number.POSITIVE_INFINITY;
  const slotKey = (task: string, slot: number) => `${task}@${iso(slot)}`;
  const shardKey = (task: string, slot: number, index: number) => `${slotKey(task, slot)}#${index}`;

  const latestRound = new Map<string, ShardSlotRow>();
  for (const slot of input.slots) {
    const key = slotKey(slot.task, slot.slot);
    if ((latestRound.get(key)?.round ?? 0) < slot.round) latestRound.set(key, slot);
  }
  const rowsOf = new Map<string, ShardRowRecord[]>();
  for (const shard of input.shards) {
    const key = slotKey(shard.task, shard.slot);
    if (shard.round !== latestRound.get(key)?.round) continue;
    rowsOf.set(key, [...(rowsOf.get(key) ?? []), shard]);
  }
  const executionsOf = new Map<string, ShardExecution[]>();
  for (const run of input.executions) {
    const key = shardKey(run.task, run.slot, run.index);
    executionsOf.set(key, [...(executionsOf.get(key) ?? []), run]);
  }

  const notEnded: string[] = [];
  const inconsistent: string[] = [];
  const twice: string[] = [];
  const unbacked: string[] = [];
  const overlapping: string[] = [];
  const reduceMissing: string[] = [];
  const reduceTwice: string[] = [];
  const repeatedNotes: string[] = [];
  const failedNotes: string[] = [];
  const figures: ShardFigures = {
    shardedSlotsEnded: 0,
    shardedSlotsOpen: 0,
    shardsChecked: 0,
    shardsFailed: 0,
    shardsReclaimed: 0,
    shardReturnsRepeated: 0,
    reduceRepeated: 0,
  };

  /** Successful returns beyond the recorded one: allowed for a killed instance or during an outage. */
  const extraReturns = (runs: ShardExecution[], recorded: string | null, what: string, into: string[]) => {
    const returned = runs.filter((run) => run.finishedAt !== null && run.error === null);
    const others = returned.filter((run) => run.instance !== recorded);
    for (const run of others) {
      if (killed(run.instance) || nearOutage(run.finishedAt ?? 0)) {
        figures.shardReturnsRepeated++;
        repeatedNotes.push(
          `${what}: returned on ${run.instance} at ${iso(run.finishedAt ?? 0)}, recorded for ${recorded}`,
        );
      } else into.push(`${what}: returned on ${run.instance} and is recorded for ${recorded}`);
    }
    return returned;
  };

  for (const [key, slot] of latestRound) {
    if (slot.outcome === null) {
      figures.shardedSlotsOpen++;
      continue;
    }
    figures.shardedSlotsEnded++;
    const rows = rowsOf.get(key) ?? [];
    if (rows.length !== slot.shardCount)
      notEnded.push(`${key}: ${rows.length} shard rows for ${slot.shardCount} shards`);
    let failed = 0;
    for (const shard of rows) {
      figures.shardsChecked++;
      if (shard.runs > 1) figures.shardsReclaimed++;
      const what = `${key} shard ${shard.index}`;
      if (shard.state === "queued" || shard.state === "running") {
        notEnded.push(`${what}: ${shard.state} in a slot that ended ${slot.outcome}`);
        continue;
      }
      if (shard.state === "failed") {
        failed++;
        figures.shardsFailed++;
        failedNotes.push(`${what}: failed on ${shard.holder}: ${shard.error}`);
      }
      const runs = (executionsOf.get(shardKey(shard.task, shard.slot, shard.index)) ?? []).sort(
        (a, b) => a.startedAt - b.startedAt,
      );
      const returned = extraReturns(runs, shard.state === "succeeded" ? shard.holder : null, what, twice);
      if (shard.state === "succeeded" && !returned.some((run) => run.instance === shard.holder))
        unbacked.push(`${what}: recorded succeeded on ${shard.holder}, whose handler never returned for it`);
      for (let i = 1; i < runs.length; i++) {
        const later = runs[i] as ShardExecution;
        const open = runs
          .slice(0, i)
          .find((run) => run.instance !== later.instance && endOf(run) > later.startedAt);
        if (open)
          overlapping.push(
            `${what}: on ${open.instance} from ${iso(open.startedAt)} and on ${later.instance} from ${iso(later.startedAt)}`,
          );
      }
    }
    if (failed > 0 && slot.outcome !== "failed")
      inconsistent.push(`${key}: ${failed} failed shard(s), the slot ${slot.outcome}`);
    if (slot.reduceState !== "succeeded" && slot.reduceState !== "failed")
      reduceMissing.push(`${key}: ended ${slot.outcome} with the reduce ${slot.reduceState}`);
    const reduces = executionsOf.get(shardKey(slot.task, slot.slot, -1)) ?? [];
    const returned = extraReturns(reduces, slot.reduceHolder, `${key} reduce`, reduceTwice);
    if (slot.reduceState === "succeeded" && !returned.some((run) => run.instance === slot.reduceHolder))
      reduceMissing.push(
        `${key}: reduce recorded succeeded on ${slot.reduceHolder}, which never returned it`,
      );
    if (slot.reduceRuns > 1) figures.reduceRepeated++;
  }

  // a failed slot run of a sharded task: its slot's derived outcome, nothing else (a run cut off at
  // a drain or whose lock was taken is not final: another instance re-runs the slot)
  const oldestKept = Math.min(...input.slots.map((slot) => slot.slot));
  const strayFailures = input.logRows
    .filter((row) => row.event === "fail" && input.tasks.includes(row.task) && row.slot !== null)
    .filter((row) => row.outcome !== "interrupted" && row.outcome !== "lock-lost")
    .filter((row) => (row.slot as number) >= oldestKept)
    .filter((row) => latestRound.get(slotKey(row.task, row.slot as number))?.outcome !== "failed")
    .map((row) => `${row.task} slot ${iso(row.slot as number)} on ${row.instance}: ${row.error}`);

  violate("sharded slots ended with shards not ended (or missing)", notEnded);
  violate("sharded slots succeeded with failed shards", inconsistent);
  violate("shards succeeded twice (a second handler return not explained by a kill or an outage)", twice);
  violate("shards recorded succeeded without their holder's handler returning", unbacked);
  violate("shards running on two instances at once", overlapping);
  violate("ended sharded slots without exactly one reduce", [...reduceMissing, ...reduceTwice]);
  violate("sharded slot runs failed outside their shards and reduce", strayFailures);
  note("shards failed (accounted for: their error recorded)", failedNotes);
  note("shard or reduce returns repeated after a kill or an outage (at least once)", repeatedNotes);
  return { figures, violations, notes };
}

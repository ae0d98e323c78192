/**
 * Sharded tasks (docs/sharding.md), cronwarden only; the goals of issue 48, read from the
 * database's record (`cronwarden_shard_slots`, `cronwarden_shards`, and `bench_reduces`, one row
 * per reduce call, written by the reduce itself: bench/workers/cronwarden.ts).
 *
 * 1. Three processes at the default concurrency, one task of 1,000 static shards (`shards:` in its
 *    config entry) whose handler sleeps 50 ms, on a cron every 10 s. Five slots with an unchanged
 *    fleet: per slot, shards succeeded exactly once (one claim, state succeeded) and reduces run (by
 *    the slot row's `reduce_runs` and by `bench_reduces`); the busiest instance's share; the slot
 *    time (scheduled) -> the reduce's end, against the ideal 1,000 x 50 ms / (3 x concurrency);
 *    and the share of shards that ran on the same instance in every one of the five slots.
 * 2. The sixth slot: once half its shards succeeded, the process coordinating it gets SIGKILL. The
 *    time from the kill to the re-claim of each shard it was running (`started_at` of the shards
 *    claimed twice), the same exactly-once and reduce figures.
 * 3. Four processes, the same task: one slot, then one process stopped cleanly between slots, and
 *    the next slot: the share of shards that ran on another instance than in the slot before (and
 *    the share whose assignment moved).
 * 4. One process, one slot of a task whose map returns 50,000 items (10,000 quick), a handler that
 *    returns at once: the slot's duration; then, the slot over, the idle load (transactions per
 *    second of the database, as scenario 3) and VmRSS at the end of that window (and VmHWM, its peak).
 */
import { rename, writeFile } from "node:fs/promises";
import path from "node:path";
import pg from "pg";
import { SCHEDULER_DEFAULTS } from "../../src/core/defaults.js";
import type { Worker } from "../lib/children.js";
import { type BenchContext, farDailyCron, prepareContender, round, sleep } from "../lib/common.js";

const SHARDS = 1_000;
const SHARD_MS = 50;
const CRON = "*/10 * * * * *";
const STABLE_SLOTS = 5;

export interface SlotFigures {
  scheduledAt: string;
  shards: number;
  /** Shards succeeded with one claim; succeeded after a re-claim; not succeeded. */
  succeededOnce: number;
  succeededReclaimed: number;
  notSucceeded: number;
  /** The slot row's reduce starts, and the reduce's own rows. */
  reduceRuns: number;
  reduceCalls: number;
  /** The busiest instance's share of the slot's shards (%). */
  busiestSharePct: number;
  /** Slot time -> the reduce's end, and first shard start -> the reduce's end (ms). */
  slotToReduceEndMs: number;
  firstStartToReduceEndMs: number;
  /** Slot time -> the first shard's start; the last shard's end -> the reduce's end (ms). */
  slotToFirstStartMs: number;
  lastEndToReduceEndMs: number;
}

export interface ShardingFigures {
  processes: number;
  concurrency: number;
  shardMs: number;
  /** 1,000 x 50 ms / (3 x concurrency). */
  idealMs: number;
  slots: SlotFigures[];
  /** Shards that ran on the same instance in each of the five slots (%). */
  sameInstancePct: number | null;
  kill: {
    slot: SlotFigures | null;
    /** Shards the killed process was running by the record just before the kill. */
    runningAtKill: number;
    /** Shards the killed process had claimed and not ended, re-claimed by another. */
    rerun: number;
    killToRerunMedianMs: number | null;
    killToRerunMaxMs: number | null;
  };
  moved: {
    /** Of 1,000 shards, those that ran on another instance after one of four stopped (%). */
    ranElsewherePct: number | null;
    assignmentMovedPct: number | null;
    stoppedInstanceSharePct: number | null;
  };
  map: {
    items: number;
    durationS: number | null;
    idleTps: number | null;
    /** The same window before the slot (the process idle since its start), and VmRSS then. */
    idleTpsBefore: number | null;
    rssMbBefore: number | null;
    /** The server's own autovacuum and autoanalyze runs in the window (pg_stat_all_tables): counted in the tps. */
    idleAutovacuums: number | null;
    idleWindowS: number;
    rssMb: number | null;
    peakRssMb: number | null;
  };
}

interface ShardRecord {
  shard_index: number;
  state: string;
  holder: string | null;
  assigned_to: string | null;
  runs: number;
  started_at: Date | null;
  ended_at: Date | null;
}

interface SlotRecord {
  scheduled_at: Date;
  round: number;
  coordinator: string | null;
  reduce_runs: number;
  reduce_ended_at: Date | null;
  outcome: string | null;
}

const instanceOf = (worker: Worker) => `${worker.label}:${worker.pid}`;

async function writeConfig(file: string, tasks: object[]): Promise<void> {
  await writeFile(`${file}.tmp`, JSON.stringify({ tasks }));
  await rename(`${file}.tmp`, file);
}

/** A fleet on its own database with the config file written, the sharded task disabled until `enable`. */
async function fleet(
  context: BenchContext,
  database: string,
  count: number,
  sharding: { shardMs: number; mapItems: number },
) {
  const launch = await prepareContender(context, "cronwarden", database, {
    prefix: "unused",
    count: 0,
    cron: farDailyCron(),
  });
  const configFile = path.join(context.dir, `${database}.json`);
  const disabled: [object, object] = [
    { name: "sharded", enabled: false, cron: CRON, shards: SHARDS },
    { name: "mapped", enabled: false, cron: farDailyCron() },
  ];
  await writeConfig(configFile, disabled);
  const pool = new pg.Pool({ connectionString: context.pg.urlOf(database), max: 2 });
  await pool.query(
    "CREATE TABLE bench_reduces (task TEXT, slot TIMESTAMPTZ, instance TEXT, results INT, at TIMESTAMPTZ)",
  );
  const workers = Array.from({ length: count }, (_, index) =>
    launch(`${database}-${index}`, { minIntervalMs: 10_000, taskMs: 0, sharding }),
  );
  await Promise.all(workers.map((worker) => worker.ready(120_000)));
  return { workers, pool, configFile, disabled };
}

async function endedSlots(pool: pg.Pool, task: string): Promise<SlotRecord[]> {
  const { rows } = await pool.query<SlotRecord>(
    `SELECT scheduled_at, round, coordinator, reduce_runs, reduce_ended_at, outcome FROM cronwarden_shard_slots
      WHERE task_name = $1 AND ended_at IS NOT NULL ORDER BY scheduled_at`,
    [task],
  );
  return rows;
}

async function waitForSlots(pool: pg.Pool, task: string, count: number, timeoutMs: number) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const slots = await endedSlots(pool, task);
    if (slots.length >= count) return slots;
    if (Date.now() > deadline)
      throw new Error(`sharding: ${slots.length} of ${count} slots of ${task} ended`);
    await sleep(200);
  }
}

async function shardsOf(pool: pg.Pool, task: string, scheduledAt: Date): Promise<ShardRecord[]> {
  const { rows } = await pool.query<ShardRecord>(
    `SELECT shard_index, state, holder, assigned_to, runs, started_at, ended_at FROM cronwarden_shards
      WHERE task_name = $1 AND scheduled_at = $2 ORDER BY shard_index`,
    [task, scheduledAt],
  );
  return rows;
}

async function slotFigures(pool: pg.Pool, slot: SlotRecord): Promise<SlotFigures> {
  const shards = await shardsOf(pool, "sharded", slot.scheduled_at);
  const { rows } = await pool.query<{ n: number }>(
    "SELECT count(*)::int AS n FROM bench_reduces WHERE task = 'sharded' AND slot = $1",
    [slot.scheduled_at],
  );
  const perInstance = new Map<string, number>();
  for (const shard of shards)
    perInstance.set(String(shard.holder), (perInstance.get(String(shard.holder)) ?? 0) + 1);
  const firstStart = Math.min(
    ...shards.map((shard) => shard.started_at?.getTime() ?? Number.POSITIVE_INFINITY),
  );
  const reduceEnd = slot.reduce_ended_at?.getTime() ?? Number.NaN;
  const lastEnd = Math.max(...shards.map((shard) => shard.ended_at?.getTime() ?? Number.NEGATIVE_INFINITY));
  return {
    scheduledAt: slot.scheduled_at.toISOString(),
    shards: shards.length,
    succeededOnce: shards.filter((shard) => shard.state === "succeeded" && shard.runs === 1).length,
    succeededReclaimed: shards.filter((shard) => shard.state === "succeeded" && shard.runs > 1).length,
    notSucceeded: shards.filter((shard) => shard.state !== "succeeded").length,
    reduceRuns: slot.reduce_runs,
    reduceCalls: rows[0]?.n ?? 0,
    busiestSharePct: round((Math.max(...perInstance.values()) / shards.length) * 100, 1) ?? Number.NaN,
    slotToReduceEndMs: Math.round(reduceEnd - slot.scheduled_at.getTime()),
    firstStartToReduceEndMs: Math.round(reduceEnd - firstStart),
    slotToFirstStartMs: Math.round(firstStart - slot.scheduled_at.getTime()),
    lastEndToReduceEndMs: Math.round(reduceEnd - lastEnd),
  };
}

const median = (values: number[]) => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted.length ? (sorted[Math.floor((sorted.length - 1) / 2)] ?? null) : null;
};

/** Parts 1 and 2: five slots on three processes, then a sixth with the coordinator SIGKILLed halfway. */
async function stableAndKill(context: BenchContext, figures: ShardingFigures): Promise<void> {
  const { workers, pool, configFile, disabled } = await fleet(context, "bench_shard", 3, {
    shardMs: SHARD_MS,
    mapItems: 0,
  });
  try {
    await writeConfig(configFile, [{ ...disabled[0], enabled: true }, disabled[1]]);
    context.progress("sharding: 3 processes ready; 5 slots of 1,000 shards, 10 s apart");
    const slots = await waitForSlots(pool, "sharded", STABLE_SLOTS, 120_000);
    const stable = slots.slice(0, STABLE_SLOTS);
    for (const slot of stable) figures.slots.push(await slotFigures(pool, slot));
    const holders = await Promise.all(
      stable.map(async (slot) => (await shardsOf(pool, "sharded", slot.scheduled_at)).map((s) => s.holder)),
    );
    const first = holders[0] ?? [];
    const same = first.filter((holder, index) => holders.every((each) => each[index] === holder)).length;
    figures.sameInstancePct = round((same / SHARDS) * 100, 1);
    context.progress(
      `sharding: slots ${figures.slots.map((slot) => `${slot.slotToReduceEndMs} ms`).join(", ")}; same instance ${figures.sameInstancePct} %`,
    );

    // the next open slot: SIGKILL its coordinator once half its shards succeeded
    const after = stable.at(-1)?.scheduled_at ?? new Date();
    let killAt = Number.NaN;
    let victim: Worker | undefined;
    let killedSlot: Date | undefined;
    for (const deadline = Date.now() + 60_000; Date.now() < deadline && !victim; ) {
      const { rows } = await pool.query<{
        scheduled_at: Date;
        coordinator: string;
        done: number;
        running: number;
      }>(
        `SELECT sl.scheduled_at, sl.coordinator,
                (SELECT count(*)::int FROM cronwarden_shards s WHERE s.task_name = sl.task_name
                    AND s.scheduled_at = sl.scheduled_at AND s.state = 'succeeded') AS done,
                (SELECT count(*)::int FROM cronwarden_shards s WHERE s.task_name = sl.task_name
                    AND s.scheduled_at = sl.scheduled_at AND s.state = 'running' AND s.holder = sl.coordinator) AS running
           FROM cronwarden_shard_slots sl
          WHERE sl.task_name = 'sharded' AND sl.scheduled_at > $1 AND sl.ended_at IS NULL
          ORDER BY sl.scheduled_at LIMIT 1`,
        [after],
      );
      const open = rows[0];
      if (open && open.done >= SHARDS / 2) {
        victim = workers.find((worker) => instanceOf(worker) === open.coordinator);
        victim?.kill("SIGKILL");
        killAt = Date.now();
        killedSlot = open.scheduled_at;
        figures.kill.runningAtKill = open.running;
        context.progress(
          `sharding: SIGKILL to the coordinator ${open.coordinator} at ${open.done}/${SHARDS}`,
        );
      } else await sleep(10);
    }
    if (!victim || !killedSlot) throw new Error("sharding: no slot reached half its shards to kill in");
    const deadline = Date.now() + 90_000;
    for (;;) {
      const ended = (await endedSlots(pool, "sharded")).find(
        (slot) => slot.scheduled_at.getTime() === killedSlot.getTime(),
      );
      if (ended) {
        figures.kill.slot = await slotFigures(pool, ended);
        break;
      }
      if (Date.now() > deadline) throw new Error("sharding: the killed slot did not end within 90 s");
      await sleep(200);
    }
    const reclaimed = (await shardsOf(pool, "sharded", killedSlot)).filter((shard) => shard.runs > 1);
    const delays = reclaimed.map((shard) => (shard.started_at?.getTime() ?? Number.NaN) - killAt);
    figures.kill.rerun = reclaimed.length;
    figures.kill.killToRerunMedianMs = median(delays);
    figures.kill.killToRerunMaxMs = delays.length ? Math.max(...delays) : null;
  } finally {
    await Promise.all(workers.map((worker) => worker.stop()));
    await pool.end();
    await context.pg.dropDatabase("bench_shard").catch(() => {});
  }
}

/** Part 3: four processes, one slot, one process stopped, the next slot. */
async function oneOfFourStops(context: BenchContext, figures: ShardingFigures): Promise<void> {
  const { workers, pool, configFile, disabled } = await fleet(context, "bench_shard_move", 4, {
    shardMs: SHARD_MS,
    mapItems: 0,
  });
  try {
    await writeConfig(configFile, [{ ...disabled[0], enabled: true }, disabled[1]]);
    context.progress("sharding: 4 processes ready; one slot, then one process stops");
    const [before] = await waitForSlots(pool, "sharded", 1, 60_000);
    if (!before) throw new Error("sharding: no slot on four processes");
    const leaving = workers[0] as Worker;
    await leaving.stop(15_000);
    const slots = await waitForSlots(pool, "sharded", 2, 60_000);
    // the first slot opened after the stop (the instance left cronwarden_instances on its way out)
    const next = slots.find((slot) => slot.scheduled_at > before.scheduled_at);
    if (!next) throw new Error("sharding: no slot after the stop");
    const [a, b] = await Promise.all([
      shardsOf(pool, "sharded", before.scheduled_at),
      shardsOf(pool, "sharded", next.scheduled_at),
    ]);
    const pct = (n: number) => round((n / SHARDS) * 100, 1);
    figures.moved.ranElsewherePct = pct(a.filter((shard, i) => shard.holder !== b[i]?.holder).length);
    figures.moved.assignmentMovedPct = pct(
      a.filter((shard, i) => shard.assigned_to !== b[i]?.assigned_to).length,
    );
    figures.moved.stoppedInstanceSharePct = pct(
      a.filter((shard) => shard.holder === instanceOf(leaving)).length,
    );
  } finally {
    await Promise.all(workers.map((worker) => worker.stop()));
    await pool.end();
    await context.pg.dropDatabase("bench_shard_move").catch(() => {});
  }
}

/** Part 4: one process, one slot of a map of 50,000 items, then the idle load and the memory. */
async function bigMap(context: BenchContext, figures: ShardingFigures): Promise<void> {
  const items = figures.map.items;
  const { workers, pool, configFile, disabled } = await fleet(context, "bench_shard_map", 1, {
    shardMs: 0,
    mapItems: items,
  });
  const [worker] = workers as [Worker];
  const window = async () => {
    const before = await context.pg.transactions("bench_shard_map");
    const began = performance.now();
    await sleep(figures.map.idleWindowS * 1000);
    const after = await context.pg.transactions("bench_shard_map");
    return round((after - before) / ((performance.now() - began) / 1000), 2);
  };
  try {
    // the same process idle before the slot, for comparison: the engine's own statements
    await sleep(10_000);
    figures.map.idleTpsBefore = await window();
    figures.map.rssMbBefore = round((await worker.rssBytes()) / (1024 * 1024), 1);
    const at = new Date(Math.ceil((Date.now() + 3_000) / 1000) * 1000);
    await writeConfig(configFile, [disabled[0], { name: "mapped", enabled: true, at: at.toISOString() }]);
    context.progress(`sharding: a map of ${items.toLocaleString("en")} items at ${at.toISOString()}`);
    const [slot] = await waitForSlots(pool, "mapped", 1, 900_000);
    figures.map.durationS = round(
      ((slot?.reduce_ended_at?.getTime() ?? Number.NaN) - at.getTime()) / 1000,
      1,
    );
    await sleep(10_000);
    const vacuums = async () =>
      (
        await pool.query<{ n: number }>(
          "SELECT sum(autovacuum_count + autoanalyze_count)::int AS n FROM pg_stat_all_tables",
        )
      ).rows[0]?.n ?? 0;
    const vacuumsBefore = await vacuums();
    figures.map.idleTps = await window();
    figures.map.idleAutovacuums = (await vacuums()) - vacuumsBefore;
    figures.map.rssMb = round((await worker.rssBytes()) / (1024 * 1024), 1);
    figures.map.peakRssMb = round((await peakRssBytes(worker.pid)) / (1024 * 1024), 1);
    context.progress(
      `sharding: map slot ${figures.map.durationS} s; idle ${figures.map.idleTps} tps (before it ${figures.map.idleTpsBefore}) (${figures.map.idleAutovacuums} autovacuum runs); VmRSS ${figures.map.rssMb} MB (peak ${figures.map.peakRssMb} MB)`,
    );
  } finally {
    await Promise.all(workers.map((each) => each.stop()));
    await pool.end();
    await context.pg.dropDatabase("bench_shard_map").catch(() => {});
  }
}

async function peakRssBytes(pid: number): Promise<number> {
  const { readFile } = await import("node:fs/promises");
  const match = /^VmHWM:\s+(\d+)\s+kB/m.exec(await readFile(`/proc/${pid}/status`, "utf8"));
  return match?.[1] ? Number(match[1]) * 1024 : Number.NaN;
}

export async function runSharding(context: BenchContext): Promise<ShardingFigures> {
  const concurrency = SCHEDULER_DEFAULTS.maxConcurrency;
  const figures: ShardingFigures = {
    processes: 3,
    concurrency,
    shardMs: SHARD_MS,
    idealMs: Math.round((SHARDS * SHARD_MS) / (3 * concurrency)),
    slots: [],
    sameInstancePct: null,
    kill: { slot: null, runningAtKill: 0, rerun: 0, killToRerunMedianMs: null, killToRerunMaxMs: null },
    moved: { ranElsewherePct: null, assignmentMovedPct: null, stoppedInstanceSharePct: null },
    map: {
      items: context.quick ? 10_000 : 50_000,
      durationS: null,
      idleTps: null,
      idleTpsBefore: null,
      rssMbBefore: null,
      idleAutovacuums: null,
      idleWindowS: context.sizes.idleWindowMs / 1000,
      rssMb: null,
      peakRssMb: null,
    },
  };
  await stableAndKill(context, figures);
  await oneOfFourStops(context, figures);
  await bigMap(context, figures);
  return figures;
}

const show = (value: number | null | undefined, digits = 0): string => {
  const rounded = round(value, digits);
  return rounded === null ? "–" : rounded.toFixed(digits);
};

/** The report's rows (bench/lib/report.ts). */
export function shardingRows(row: (...cells: string[]) => void, figures: ShardingFigures): void {
  const slots = figures.slots;
  const range = (values: number[], digits = 0) =>
    values.length ? `${show(Math.min(...values), digits)}-${show(Math.max(...values), digits)}` : "–";
  const title = `sharding (1,000 static shards of ${figures.shardMs} ms, ${figures.processes} processes at concurrency ${figures.concurrency}, ${slots.length} slots)`;
  row(
    title,
    "per slot: succeeded with one claim / re-claimed / not succeeded; reduces (slot row / its own rows)",
    slots
      .map(
        (slot) =>
          `${slot.succeededOnce}/${slot.succeededReclaimed}/${slot.notSucceeded}; ${slot.reduceRuns}/${slot.reduceCalls}`,
      )
      .join(" · "),
    "n/a",
  );
  row(
    "",
    "busiest instance's share (%, goal <= 40)",
    range(
      slots.map((slot) => slot.busiestSharePct),
      1,
    ),
    "n/a",
  );
  row(
    "",
    `slot -> reduce end (ms; ideal ${figures.idealMs}, goal <= 2x) / first shard start -> reduce end`,
    `${range(slots.map((slot) => slot.slotToReduceEndMs))} / ${range(slots.map((slot) => slot.firstStartToReduceEndMs))}`,
    "n/a",
  );
  row(
    "",
    "slot -> first shard start / last shard end -> reduce end (ms)",
    `${range(slots.map((slot) => slot.slotToFirstStartMs))} / ${range(slots.map((slot) => slot.lastEndToReduceEndMs))}`,
    "n/a",
  );
  row(
    "",
    "shards on the same instance in all 5 slots (%, goal >= 95)",
    show(figures.sameInstancePct, 1),
    "n/a",
  );
  const kill = figures.kill;
  row(
    "",
    "coordinator SIGKILLed at half, running N shards: one claim / re-claimed / not succeeded; reduces; kill -> re-run median / max (ms, goal <= 2,000)",
    kill.slot
      ? `N = ${kill.runningAtKill}: ${kill.slot.succeededOnce}/${kill.slot.succeededReclaimed}/${kill.slot.notSucceeded}; ${kill.slot.reduceRuns}/${kill.slot.reduceCalls}; ${show(kill.killToRerunMedianMs)} / ${show(kill.killToRerunMaxMs)}`
      : "–",
    "n/a",
  );
  row(
    "",
    "one of 4 stops: shards that ran elsewhere / assignment moved / the stopped one's share (%, goal <= 35)",
    `${show(figures.moved.ranElsewherePct, 1)} / ${show(figures.moved.assignmentMovedPct, 1)} / ${show(figures.moved.stoppedInstanceSharePct, 1)}`,
    "n/a",
  );
  const map = figures.map;
  row(
    `sharding, a map of ${map.items.toLocaleString("en")} items, one process`,
    `slot (s) / idle tps over ${map.idleWindowS} s after it (goal <= 1), autovacuum runs in it, before the slot / VmRSS after, peak, before (MB, goal <= 120)`,
    `${show(map.durationS, 1)} / ${show(map.idleTps, 2)}, ${show(map.idleAutovacuums)}, ${show(map.idleTpsBefore, 2)} / ${show(map.rssMb, 1)}, ${show(map.peakRssMb, 1)}, ${show(map.rssMbBefore, 1)}`,
    "n/a",
  );
}

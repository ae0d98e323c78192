/**
 * Lateness: one task on `* * * * * *` (cronwarden with minIntervalMs 1000); for each slot,
 * handler entry minus the slot. Two poll settings, each with both contenders:
 * - 1000 ms, the cron's own interval (cronwarden's default until 155333c; now half the minimum
 *   interval). Agenda locks a job ahead of its slot only if the job is free at the poll before it; a
 *   run that is still going at that poll (or a slot that was already late) leaves the next slot
 *   to the poll after it, late by the poll's phase, and every later slot the same: the figure is
 *   either a few ms or up to a second, depending on the phase each process happens to get.
 * - 500 ms (half the interval, cronwarden's default for minIntervalMs 1000): a late slot is
 *   followed by a poll that locks the next one ahead.
 * The first 3 slots of each process are warm-up. One process per contender and setting, each on
 * its own database; the contenders of a setting run at the same time.
 */
import type { Worker } from "../lib/children.js";
import {
  type BenchContext,
  CONTENDERS,
  type Contender,
  percentile,
  prepareContender,
} from "../lib/common.js";

const WARM_UP_SLOTS = 3;
const CRON = "* * * * * *";
/** A start this much past its slot counts as late (missed the lock-ahead). */
const LATE_MS = 100;

export interface LatenessFigures {
  pollMs: number;
  slots: number;
  p50: number;
  p99: number;
  max: number;
  /** Slots started more than 100 ms after their time. */
  late: number;
  /** Slots between the first and last measured start that did not run. */
  missed: number;
  /** Slots that started more than once. */
  duplicates: number;
}

export type LatenessResult = Record<number, Record<Contender, LatenessFigures>>;

export const LATENESS_POLLS = [1000, 500];

export async function runLateness(context: BenchContext): Promise<LatenessResult> {
  const result: LatenessResult = {};
  const settings = async (pollMs: number) => {
    result[pollMs] = await latenessWith(context, pollMs);
  };
  if (context.quick) await Promise.all(LATENESS_POLLS.map(settings));
  else for (const pollMs of LATENESS_POLLS) await settings(pollMs);
  return result;
}

async function latenessWith(
  context: BenchContext,
  pollMs: number,
): Promise<Record<Contender, LatenessFigures>> {
  const slots = context.sizes.latenessSlots;
  const workers = new Map<Contender, Worker>();
  const databases: string[] = [];
  try {
    for (const contender of CONTENDERS) {
      const database = `bench_lateness_${pollMs}_${contender}`;
      databases.push(database);
      const launch = await prepareContender(context, contender, database, {
        prefix: "tick",
        count: 1,
        cron: CRON,
      });
      workers.set(
        contender,
        launch(`lateness-${pollMs}-${contender}`, { processEveryMs: pollMs, minIntervalMs: 1000, taskMs: 0 }),
      );
    }
    for (const worker of workers.values()) await worker.ready(60_000);
    context.progress(`lateness, poll ${pollMs} ms: ready; ${slots} slots after ${WARM_UP_SLOTS} warm-up`);
    const needed = slots + WARM_UP_SLOTS;
    await Promise.all(
      [...workers.values()].map((worker) =>
        worker.waitUntil(`${needed} starts`, () => worker.starts().length >= needed, needed * 1000 + 30_000),
      ),
    );
    const result = {} as Record<Contender, LatenessFigures>;
    for (const [contender, worker] of workers) {
      const starts = worker.starts().slice(WARM_UP_SLOTS, WARM_UP_SLOTS + slots);
      const late = starts.map((start) => start.at - (start.slot ?? Number.NaN));
      const bySlot = new Map<number, number>();
      for (const start of starts) bySlot.set(start.slot ?? -1, (bySlot.get(start.slot ?? -1) ?? 0) + 1);
      const slotTimes = [...bySlot.keys()].sort((a, b) => a - b);
      const first = slotTimes[0] ?? 0;
      const last = slotTimes.at(-1) ?? 0;
      result[contender] = {
        pollMs,
        slots: starts.length,
        p50: percentile(late, 50),
        p99: percentile(late, 99),
        max: Math.max(...late),
        late: late.filter((ms) => ms > LATE_MS).length,
        missed: Math.round((last - first) / 1000) + 1 - bySlot.size,
        duplicates: [...bySlot.values()].filter((count) => count > 1).length,
      };
    }
    return result;
  } finally {
    await Promise.all([...workers.values()].map((worker) => worker.stop()));
    for (const database of databases) await context.pg.dropDatabase(database).catch(() => {});
  }
}

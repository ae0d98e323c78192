/**
 * Failover: P processes per contender on one database, one long task on a once-a-minute cron
 * (6 fields, at the second of a boundary a few seconds ahead), lock lifetime 15 s (cronwarden's
 * default; raw Agenda set to the same, its own default is 10 min), default 5 s poll. One second
 * after the first run starts, its process gets SIGKILL. Failover is the time from the kill to the
 * next handler start in another process, whichever slot it is for: cronwarden re-runs the killed
 * slot; raw Agenda has already moved the job to its next slot before the handler started, so the
 * killed slot is lost and the next start is the next minute's. Duplicates are starts of a slot
 * beyond one (beyond two for the killed slot: the killed run and its re-run), over the killed
 * slot and the next one; the next slot's run is watched for `failoverObserveMs` (full mode: past
 * its end, to see what a run longer than the lock lifetime does). Both contenders at the same
 * time, each on its own database.
 */
import { type Worker, waitFor } from "../lib/children.js";
import {
  type BenchContext,
  boundaryAfter,
  CONTENDERS,
  type Contender,
  DEFAULT_PROCESS_EVERY_MS,
  LOCK_LIFETIME_MS,
  prepareContender,
  sleep,
} from "../lib/common.js";

const KILL_AFTER_MS = 1_000;
const INTERVAL_MS = 60_000;

export interface FailoverTrial {
  failoverS: number | null;
  /** The first start after the kill was a re-run of the killed slot (else a later slot). */
  sameSlot: boolean;
  /** The killed slot never completed a run anywhere. */
  killedSlotLost: boolean;
  duplicates: number;
  /** Every start after the kill: seconds after the kill, slot (+s from the killed slot), re-run flag. */
  startsAfterKill: Array<{ afterKillS: number; slotOffsetS: number | null; rerun: boolean }>;
  /** Errors after the kill (s after the kill: message): failed runs, Agenda's "execution ... took more than". */
  failures: string[];
}

export async function runFailover(context: BenchContext): Promise<Record<Contender, FailoverTrial[]>> {
  const result: Record<Contender, FailoverTrial[]> = { cronwarden: [], agenda: [] };
  for (let trial = 1; trial <= context.sizes.failoverTrials; trial++) {
    context.progress(`failover: trial ${trial}/${context.sizes.failoverTrials}`);
    const trials = await Promise.all(CONTENDERS.map((contender) => failoverOnce(context, contender, trial)));
    CONTENDERS.forEach((contender, index) => {
      const figures = trials[index];
      if (figures) result[contender].push(figures);
    });
  }
  return result;
}

/**
 * The partition fallback: the same trial with SIGSTOP instead of SIGKILL, once per contender. A
 * stopped process keeps its connections open (as one cut off by the network does until the
 * server's TCP keepalive ends them), so cronwarden's liveness lock stays held and only the lock
 * lifetime can free the job: lifetime plus a poll.
 */
export async function runPartition(context: BenchContext): Promise<Record<Contender, FailoverTrial>> {
  context.progress("failover: the partition fallback (SIGSTOP)");
  const [cronwarden, agenda] = await Promise.all(
    CONTENDERS.map((contender) => failoverOnce(context, contender, "stop", "SIGSTOP")),
  );
  return { cronwarden: cronwarden as FailoverTrial, agenda: agenda as FailoverTrial };
}

async function failoverOnce(
  context: BenchContext,
  contender: Contender,
  trial: number | string,
  signal: "SIGKILL" | "SIGSTOP" = "SIGKILL",
): Promise<FailoverTrial> {
  const { failoverProcesses, failoverTaskMs, failoverObserveMs } = context.sizes;
  const database = `bench_failover_${contender}_${trial}`;
  const boundary = boundaryAfter(10_000 + failoverProcesses * 5_000);
  const tasks = { prefix: "long", count: 1, cron: `${boundary.getUTCSeconds()} * * * * *` };
  const launch = await prepareContender(context, contender, database, tasks);
  const workers: Worker[] = [];
  try {
    // one after the other, as a rolling start would: raw Agenda's every() upserts the job row
    for (let index = 0; index < failoverProcesses; index++) {
      const worker = launch(`failover-${contender}-${trial}-${index}`, {
        processEveryMs: DEFAULT_PROCESS_EVERY_MS,
        minIntervalMs: INTERVAL_MS,
        lockLifetimeMs: LOCK_LIFETIME_MS,
        taskMs: failoverTaskMs,
      });
      workers.push(worker);
      await worker.ready(60_000);
    }
    if (Date.now() > boundary.getTime() - 500)
      throw new Error(`failover ${contender}: processes were not ready before the boundary`);
    const allStarts = () => workers.flatMap((worker) => worker.starts());
    const timeout = boundary.getTime() - Date.now() + 2 * DEFAULT_PROCESS_EVERY_MS + 10_000;
    await waitFor("first start", () => allStarts().length > 0, timeout, workers);
    const first = allStarts()[0];
    const victim = workers.find((worker) => worker.pid === first?.pid);
    if (!first || !victim) throw new Error(`failover ${contender}: no process started the task`);
    const killedSlot = first.slot ?? boundary.getTime();
    await sleep(KILL_AFTER_MS - (Date.now() - first.at));
    victim.kill(signal);
    const killedAt = Date.now();
    if (signal === "SIGKILL") await victim.exited;
    const survivors = workers.filter((worker) => worker !== victim);
    const startsAfterKill = () =>
      survivors.flatMap((worker) => worker.starts()).filter((start) => start.at >= killedAt);
    // the next slot is a minute after the killed one: a failover can take until then
    await waitFor(
      "start after the kill",
      () => startsAfterKill().length > 0,
      killedSlot + INTERVAL_MS - Date.now() + 4 * DEFAULT_PROCESS_EVERY_MS + 10_000,
      survivors,
    ).catch((error: Error) => context.progress(`failover ${contender}: ${error.message}`));
    // watch the killed slot's re-run (if any) and the next slot's run
    await sleep(killedSlot + INTERVAL_MS + failoverObserveMs - Date.now());
    const starts = startsAfterKill().sort((a, b) => a.at - b.at);
    const takeover = starts[0];
    const perSlot = new Map<number, number>();
    for (const start of allStarts()) {
      const slot = start.slot ?? -1;
      perSlot.set(slot, (perSlot.get(slot) ?? 0) + 1);
    }
    let duplicates = 0;
    for (const [slot, count] of perSlot) duplicates += Math.max(0, count - (slot === killedSlot ? 2 : 1));
    const finishes = survivors.flatMap((worker) => worker.messages);
    const failures = finishes.flatMap((message) => {
      if (message.type === "finish" && message.error !== null && message.at >= killedAt)
        return [`${((message.at - killedAt) / 1000).toFixed(1)} s: ${message.error}`];
      if (message.type === "engine-error" && message.at >= killedAt)
        return [`${((message.at - killedAt) / 1000).toFixed(1)} s: ${message.message}`];
      return [];
    });
    return {
      failoverS: takeover ? (takeover.at - killedAt) / 1000 : null,
      sameSlot: takeover?.slot === killedSlot,
      killedSlotLost: !starts.some((start) => start.slot === killedSlot),
      duplicates,
      startsAfterKill: starts.map((start) => ({
        afterKillS: (start.at - killedAt) / 1000,
        slotOffsetS: start.slot === null ? null : (start.slot - killedSlot) / 1000,
        rerun: start.rerun,
      })),
      failures,
    };
  } finally {
    for (const worker of workers) worker.kill();
    await Promise.all(workers.map((worker) => worker.exited));
    await context.pg.dropDatabase(database).catch(() => {});
  }
}

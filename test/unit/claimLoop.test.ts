import { beforeEach, describe, expect, it } from "vitest";
import {
  type ClaimedJob,
  ClaimLoop,
  type ClaimLoopDeps,
  type ClaimRequest,
} from "../../src/engine/claimLoop.js";
import { TestClock } from "../helpers/testClock.js";

/**
 * The claim loop driven by a test clock (test/helpers/testClock.ts): advance() fires the loop's
 * timers and moves its time together; stepWall() moves its wall time alone, as when a timer fires
 * on the event loop's cached time, or after the clock was stepped back.
 */

interface Job extends ClaimedJob {}

let clock = new TestClock();
const now = () => clock.now();

function loop(options: {
  due: Job[];
  startAheadMs?: number;
  maxConcurrency?: number;
  maxClaimed?: number;
  baseClaimed?: number;
  /** How long each handler runs (by job id). */
  runFor?: number | ((id: string) => number);
  /** After the handler's `runFor`, the run's final save takes this long (the handler is done). */
  saveFor?: number;
  processEveryMs?: number;
  lookAheadMs?: number;
  lockLifetimeMs?: number;
  /** Instances sharing the due jobs (a claim's `share`), as the database counts them; default 1. */
  instances?: number;
}): {
  loop: ClaimLoop<Job>;
  started: { id: string; at: number }[];
  /** When each run was handed over (before its wait for a worker). */
  handed: { id: string; at: number }[];
  /** The most handlers that ran at once. */
  mostWorking: () => number;
  requests: ClaimRequest[];
  released: string[];
  stale: { id: string; waitedFor: string }[];
  /** Starts the loop and waits for its first claim pass. */
  begin: () => Promise<void>;
  /** The ids of the runs started so far, in start order. */
  startedIds: () => string[];
  /** Jobs in the "database", not claimed yet: a test may add some. */
  pending: Job[];
} {
  const pending = [...options.due];
  const started: { id: string; at: number }[] = [];
  const handed: { id: string; at: number }[] = [];
  let working = 0;
  let mostWorking = 0;
  const requests: ClaimRequest[] = [];
  const released: string[] = [];
  const stale: { id: string; waitedFor: string }[] = [];
  const deps: ClaimLoopDeps<Job> = {
    claim: async (request) => {
      requests.push(request);
      const due = pending.filter((job) => job.dueAt <= request.until.getTime());
      const { share } = request;
      // as claimDueJobs counts a share: the due jobs, those held included, among the instances
      const limit = share
        ? Math.min(
            request.limit,
            Math.max(
              share.atLeast,
              Math.ceil((due.length + share.held) / (options.instances ?? 1)) - share.held,
            ),
          )
        : request.limit;
      const taken = due.filter((job) => !request.holding.includes(job.name)).slice(0, limit);
      for (const job of taken) pending.splice(pending.indexOf(job), 1);
      return taken.map((job) => ({ ...job, lockedAt: request.now.getTime() }));
    },
    run: async (job, turn) => {
      handed.push({ id: job.id, at: now() });
      const worker = turn.worker();
      if (worker) await worker;
      started.push({ id: job.id, at: now() });
      working += 1;
      mostWorking = Math.max(mostWorking, working);
      const runFor = typeof options.runFor === "function" ? options.runFor(job.id) : options.runFor;
      await clock.sleep(runFor ?? 10);
      working -= 1;
      if (options.saveFor === undefined) return;
      turn.handlerDone();
      await clock.sleep(options.saveFor);
    },
    release: async (job) => {
      released.push(job.id);
    },
    onStale: (job, waitedFor) => {
      stale.push({ id: job.id, waitedFor });
      // as in the database: a lock that expired is anyone's to claim
      pending.push({ id: job.id, name: job.name, dueAt: job.dueAt, lockedAt: 0 });
    },
    onError: (error) => {
      throw error;
    },
    processEveryMs: options.processEveryMs ?? 5_000,
    lookAheadMs: options.lookAheadMs ?? 6_000,
    ...(options.startAheadMs === undefined ? {} : { startAheadMs: options.startAheadMs }),
    maxConcurrency: options.maxConcurrency ?? 20,
    maxClaimed: options.maxClaimed ?? 40,
    ...(options.baseClaimed === undefined ? {} : { baseClaimed: options.baseClaimed }),
    lockLifetimeMs: options.lockLifetimeMs ?? 15_000,
    clock,
  };
  const claims = new ClaimLoop(deps);
  return {
    loop: claims,
    started,
    handed,
    mostWorking: () => mostWorking,
    requests,
    released,
    stale,
    begin: async () => {
      claims.start();
      await claims.settled();
    },
    startedIds: () => started.map((run) => run.id),
    pending,
  };
}

const job = (id: string, dueAt: number): Job => ({ id, name: id, dueAt, lockedAt: 0 });

/** The runs whose handler started later than they were handed over: they waited on deck for a worker. */
function waitedOnDeck(runs: { handed: { id: string; at: number }[]; started: { id: string; at: number }[] }) {
  return runs.handed
    .filter((run) => (runs.started.find((each) => each.id === run.id)?.at ?? run.at) > run.at)
    .map((run) => run.id);
}

/** Drains with the fake clock moving, so runs going can end. */
async function drained(claims: ClaimLoop<Job>, timeoutMs: number) {
  const result = claims.drain(timeoutMs);
  await clock.advance(timeoutMs);
  return result;
}

beforeEach(() => {
  clock = new TestClock(new Date("2026-12-01T10:00:00.000Z"));
});

describe("ClaimLoop", () => {
  it("starts a job claimed ahead at its slot, even when its timer fires while the clock reads before the slot", async () => {
    const slot = clock.now() + 3_000; // claimed by the first pass (look-ahead 6 s), 3 s ahead
    const { loop: claims, started, begin } = loop({ due: [job("minute", slot)] });
    await begin();
    clock.stepWall(-5); // the clock stepped back by 5 ms after the claim
    await clock.advance(3_001);
    expect(started).toEqual([]); // the timer fired, but by the loop's clock the slot is 4 ms away
    await clock.advance(10);
    // started at the slot by the loop's clock, not at the next poll (5 s later)
    expect(started).toHaveLength(1);
    expect((started[0]?.at ?? 0) - slot).toBeGreaterThanOrEqual(0);
    expect((started[0]?.at ?? 0) - slot).toBeLessThan(10);
    expect(await drained(claims, 1_000)).toEqual({ completed: 1, running: 0 });
  });

  it("with a start-ahead, hands a job claimed ahead to its run that long before its slot", async () => {
    const slot = clock.now() + 3_000;
    const {
      loop: claims,
      started,
      begin,
    } = loop({
      due: [job("minute", slot), job("overdue", clock.now() - 1_000)],
      startAheadMs: 200,
    });
    await begin();
    expect(started.map((run) => run.id)).toEqual(["overdue"]);
    await clock.advance(2_790);
    expect(started).toHaveLength(1);
    await clock.advance(20);
    expect(started).toHaveLength(2);
    expect((started[1]?.at ?? 0) - (slot - 200)).toBeGreaterThanOrEqual(0);
    expect((started[1]?.at ?? 0) - (slot - 200)).toBeLessThan(10);
    expect(await drained(claims, 1_000)).toEqual({ completed: 1, running: 0 });
  });

  it("claims in one pass the due jobs of every name, up to the room it has, and the rest as runs end", async () => {
    const boundary = clock.now() + 1_000;
    const herd = Array.from({ length: 10 }, (_, index) => job(`task-${index}`, boundary));
    const {
      loop: claims,
      begin,
      startedIds,
      requests,
    } = loop({ due: herd, maxConcurrency: 2, maxClaimed: 4 });
    await begin();
    expect(requests).toHaveLength(1);
    expect(requests[0]?.limit).toBe(4);
    expect(claims.held).toEqual({ waiting: 4, running: 0, working: 0, onDeck: 0 });
    await clock.advance(1_001);
    expect(startedIds()).toEqual(["task-0", "task-1"]);
    await clock.advance(200); // each run takes 10 ms; ends make room, refills claim the rest
    expect(startedIds().sort()).toEqual(herd.map((each) => each.id).sort());
    expect(new Set(startedIds()).size).toBe(10);
    expect(await drained(claims, 1_000)).toEqual({ completed: 0, running: 0 });
  });

  it("hands queued jobs to runs most overdue first, whatever order their claims came in", async () => {
    const now = clock.now();
    const runs = loop({
      due: [job("first", now - 200), job("later", now - 100)],
      maxConcurrency: 1,
      runFor: 1_000,
    });
    await runs.begin();
    expect(runs.startedIds()).toEqual(["first"]); // "later" waits for the worker
    runs.pending.push(job("earlier", now - 5_000));
    runs.loop.claimNow();
    await runs.loop.settled();
    expect(runs.loop.held.waiting).toBe(2);
    await clock.advance(2_001);
    expect(runs.startedIds()).toEqual(["first", "earlier", "later"]);
    expect(await drained(runs.loop, 2_000)).toEqual({ completed: 1, running: 0 });
  });

  it("before any handler starts, holds its share of a herd and hands it over; never more than maxConcurrency handlers at once", async () => {
    const due = Array.from({ length: 30 }, (_, index) => job(`task-${index}`, clock.now()));
    const quick = loop({
      due,
      maxConcurrency: 2,
      startAheadMs: 200,
      runFor: 10,
      baseClaimed: 4,
      maxClaimed: 30,
      instances: 3,
    });
    await quick.begin();
    // how long a handler takes is unknown: the share of 3 instances, every run handed over (on deck)
    expect(quick.requests[0]).toMatchObject({ limit: 30, share: { atLeast: 4, held: 0 } });
    expect(quick.handed.map((run) => run.id)).toEqual(due.slice(0, 10).map((each) => each.id));
    expect(quick.loop.held.onDeck).toBe(8);
    await clock.advance(10); // the first two ended in 10 ms each
    // the workers start 2 × 200 / 10 = 40 runs within the start-ahead: the rest are claimed
    await clock.advance(200);
    expect(quick.startedIds().sort()).toEqual(due.map((each) => each.id).sort());
    expect(quick.mostWorking()).toBe(2);
    expect(waitedOnDeck(quick)).not.toEqual([]);
    expect(await drained(quick.loop, 1_000)).toEqual({ completed: 0, running: 0 });
  });

  it("with slow handlers going, a run is handed over only when a worker is free, and no more than baseClaimed are held", async () => {
    const at = clock.now();
    const later = Array.from({ length: 6 }, (_, index) => job(`slow-${index}`, at + 1_000));
    const due = [job("first-0", at), job("first-1", at), ...later];
    const slow = loop({
      due,
      maxConcurrency: 2,
      startAheadMs: 200,
      runFor: 5_000,
      baseClaimed: 4,
      maxClaimed: 30,
      instances: 3,
    });
    await slow.begin();
    // before a handler starts: the share of the 8 due among 3 instances, at least baseClaimed
    expect(slow.requests[0]?.share).toEqual({ atLeast: 4, held: 0 });
    expect(slow.loop.held.waiting + slow.loop.held.running).toBe(4);
    await clock.advance(30_001);
    expect(slow.startedIds().sort()).toEqual(due.map((each) => each.id).sort());
    // the first two handlers had been going for 800 ms when the others' start-ahead came
    expect(waitedOnDeck(slow)).toEqual([]);
    expect(slow.requests.slice(1).every((request) => request.share === undefined && request.limit <= 4)).toBe(
      true,
    );
    expect(slow.stale).toEqual([]);
    expect(await drained(slow.loop, 1_000)).toEqual({ completed: 0, running: 0 });
  });

  it("handlers going longer than the ones before keep runs off deck", async () => {
    const at = clock.now();
    const mixed = loop({
      due: [
        job("quick-0", at),
        job("quick-1", at),
        job("slow-0", at + 100),
        job("slow-1", at + 100),
        job("later", at + 3_000),
      ],
      maxConcurrency: 2,
      startAheadMs: 200,
      runFor: (id) => (id.startsWith("quick") ? 10 : 10_000),
      maxClaimed: 10,
    });
    await mixed.begin();
    await clock.advance(3_000);
    // the handlers so far took 10 ms, but the two going have run for 2.9 s: "later" is not handed
    // over to wait, recorded as started, for their end
    expect(mixed.handed.map((run) => run.id)).not.toContain("later");
    await clock.advance(7_200);
    expect(mixed.startedIds()).toContain("later");
    expect(waitedOnDeck(mixed)).not.toContain("later");
    expect(await drained(mixed.loop, 20_000)).toEqual({ completed: 1, running: 0 });
  });

  it("a run whose handler is done frees its worker; its final save still holds the job", async () => {
    const at = clock.now();
    const {
      loop: claims,
      started,
      begin,
      startedIds,
      requests,
    } = loop({
      due: [job("first", at), job("second", at), job("third", at + 5_500)],
      maxConcurrency: 1,
      maxClaimed: 2,
      runFor: 10,
      saveFor: 1_000,
    });
    await begin();
    await clock.advance(1);
    expect(startedIds()).toEqual(["first"]);
    await clock.advance(10); // first's handler is done, its save takes 1 s
    expect(startedIds()).toEqual(["first", "second"]);
    expect(started[1]?.at).toBe(at + 10);
    expect(claims.held).toEqual({ waiting: 0, running: 2, working: 1, onDeck: 0 });
    await clock.advance(500);
    // both handlers done, both saves going: no worker busy, but the two jobs held fill maxClaimed
    expect(claims.held).toEqual({ waiting: 0, running: 2, working: 0, onDeck: 0 });
    const asked = requests.length;
    await clock.advance(5_000); // the saves ended at 1 s; the 5 s poll claims "third"
    expect(requests.length).toBeGreaterThan(asked);
    expect(startedIds()).toEqual(["first", "second", "third"]);
    expect(await drained(claims, 2_000)).toEqual({ completed: 1, running: 0 });
  });

  it("a drain waits for a final save going after its handler is done", async () => {
    const {
      loop: claims,
      started,
      begin,
    } = loop({ due: [job("saving", clock.now())], runFor: 10, saveFor: 3_000 });
    await begin();
    await clock.advance(100);
    expect(started).toHaveLength(1);
    expect(claims.held).toEqual({ waiting: 0, running: 1, working: 0, onDeck: 0 });
    const result = claims.drain(10_000);
    await clock.advance(2_000);
    expect(claims.held.running).toBe(1);
    await clock.advance(1_000);
    expect(await result).toEqual({ completed: 1, running: 0 });
  });

  it("drops a job whose lock expired while it waited for a worker, and claims it again at once", async () => {
    const {
      loop: claims,
      begin,
      started,
      stale,
      released,
      requests,
    } = loop({
      due: [job("long", clock.now()), job("starved", clock.now())],
      maxConcurrency: 1,
      runFor: 20_000,
    });
    const begun = clock.now();
    await begin();
    await clock.advance(1);
    expect(started.map((run) => run.id)).toEqual(["long"]);
    await clock.advance(20_000); // "starved" waited past its 15 s lock lifetime
    expect(stale).toEqual([{ id: "starved", waitedFor: "worker" }]);
    // not run under the lock it lost, but under the one a pass took as "long" ended, not a poll later
    expect(started.map((run) => [run.id, run.at - begun])).toEqual([
      ["long", 0],
      ["starved", 20_000],
    ]);
    expect(requests.at(-1)?.now.getTime()).toBe(begun + 20_000);
    expect(await drained(claims, 20_000)).toEqual({ completed: 1, running: 0 });
    expect(released).toEqual([]);
  });

  it("claims a job again at its slot when the poll is longer than its lock lasts, not a poll later", async () => {
    const slot = clock.now() + 30_000; // claimed by the first pass, a minute's look-ahead
    const {
      started,
      stale,
      requests,
      begin,
      loop: claims,
    } = loop({
      due: [job("minute", slot)],
      processEveryMs: 60_000,
      lookAheadMs: 61_000,
      lockLifetimeMs: 2_000,
    });
    await begin();
    expect(requests).toHaveLength(1);
    await clock.advance(30_001);
    expect(stale).toEqual([{ id: "minute", waitedFor: "slot" }]);
    expect(requests).toHaveLength(2);
    expect(started.map((run) => [run.id, run.at - slot])).toEqual([["minute", 1]]);
    expect(await drained(claims, 1_000)).toEqual({ completed: 1, running: 0 });
  });

  it("at the drain, frees the jobs claimed ahead and stops claiming; runs going are waited for", async () => {
    const {
      loop: claims,
      begin,
      startedIds,
      released,
      requests,
    } = loop({
      due: [job("now", clock.now()), job("soon", clock.now() + 3_000)],
      runFor: 2_000,
    });
    await begin();
    await clock.advance(1);
    expect(startedIds()).toEqual(["now"]);
    const draining = claims.drain(10_000);
    await clock.advance(0);
    expect(released).toEqual(["soon"]);
    await clock.advance(2_000);
    expect(await draining).toEqual({ completed: 1, running: 0 });
    const passes = requests.length;
    await clock.advance(20_000);
    expect(requests).toHaveLength(passes);
    expect(startedIds()).toEqual(["now"]);
  });

  it("a drain deadline leaves runs going counted", async () => {
    const { loop: claims, begin } = loop({ due: [job("endless", clock.now())], runFor: 60_000 });
    await begin();
    await clock.advance(1);
    expect(await drained(claims, 1_000)).toEqual({ completed: 0, running: 1 });
  });
});

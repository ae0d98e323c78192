import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { systemClock } from "../../src/core/clock.js";
import { AgendaEngine } from "../../src/engine/agendaEngine.js";
import { type ClaimedRow, CronwardenJobRepository } from "../../src/engine/jobRepository.js";
import { StaleStartError } from "../../src/engine/staleStart.js";
import { createTestDatabase, type TestDatabase } from "../helpers/database.js";
import { LogCapture } from "../helpers/logs.js";
import { pollUntil } from "../helpers/poll.js";
import { TestClock } from "../helpers/testClock.js";

/** The repository's locking rules, driven the way Agenda drives them, against a real PostgreSQL. */

const LOCK_LIFETIME_MS = 10_000;
let db: TestDatabase;
let engine: AgendaEngine;
const logs = new LogCapture();

beforeAll(async () => {
  db = await createTestDatabase();
  engine = new AgendaEngine({
    pool: db.pool,
    instanceId: "setup",
    processEveryMs: 1000,
    lockLifetimeMs: LOCK_LIFETIME_MS,
    logger: logs.logger,
  });
  await engine.prepare(); // the schema; its workers never start
});

afterAll(async () => {
  await db?.drop();
});

function repository() {
  return {
    repo: new CronwardenJobRepository(db.pool, logs.logger, {
      lockLifetimeMs: LOCK_LIFETIME_MS,
      clock: systemClock,
    }),
  };
}

/** Creates due jobs (their next run moved to the past) and returns their names. */
async function dueJobs(prefix: string, count: number): Promise<string[]> {
  const names = Array.from({ length: count }, (_, index) => `${prefix}-${index}`);
  for (const name of names) await engine.createJob(name, "0 0 * * *", "UTC", true);
  await db.pool.query("UPDATE agenda_jobs SET next_run_at = now() - interval '1 minute' WHERE name LIKE $1", [
    `${prefix}-%`,
  ]);
  return names;
}

/** One claim pass of the claim loop (src/engine/claimLoop.ts) for these names. */
const claim = (
  repo: CronwardenJobRepository,
  names: string[],
  limit: number,
  holding: string[] = [],
  now = new Date(),
) => {
  return repo.claimDue({
    names,
    skip: holding,
    until: new Date(now.getTime() + 1000),
    limit,
    owner: "test",
    now,
  });
};

const lockFor = async (repo: CronwardenJobRepository, name: string) => (await claim(repo, [name], 1))[0];

/**
 * Waits until an expired lock can count as expired: the server has been up a whole lock lifetime
 * (sql/claim.ts LOCK_EXPIRED), read from the server itself.
 */
async function serverUpForALockLifetime(): Promise<void> {
  await pollUntil(
    "the server up for a lock lifetime",
    async () =>
      (
        await db.pool.query<{ up: boolean }>(
          "SELECT pg_postmaster_start_time() <= now() - make_interval(secs => $1::double precision / 1000) AS up",
          [LOCK_LIFETIME_MS],
        )
      ).rows[0]?.up,
    { timeoutMs: 2 * LOCK_LIFETIME_MS, intervalMs: 200 },
  );
}

async function lockedAt(name: string): Promise<Date | null> {
  const { rows } = await db.pool.query("SELECT locked_at FROM agenda_jobs WHERE name = $1", [name]);
  return rows[0]?.locked_at ?? null;
}

describe("CronwardenJobRepository", () => {
  it("the save that starts a run renews its lock and reads the schedule back", async () => {
    const [name] = await dueJobs("start", 1);
    const clock = new TestClock(Date.now());
    const repo = new CronwardenJobRepository(db.pool, logs.logger, {
      lockLifetimeMs: LOCK_LIFETIME_MS,
      clock,
    });
    const [claimed] = await claim(repo, [name as string], 1, [], new Date(clock.now()));
    const { job, run } = claimed as ClaimedRow;
    const taken = job.lockedAt as Date;
    await clock.advance(20); // the start save stamps its lock time from the engine's clock
    await repo.startRun(run, { ...job, lastRunAt: new Date(clock.now()) });
    const renewed = await lockedAt(name as string);
    expect(renewed?.getTime()).toBeGreaterThan(taken.getTime());
    expect(run.heldLockAt?.getTime()).toBe(renewed?.getTime());
    expect(run.takeRowAtStart()).toEqual({
      disabled: false,
      repeat_interval: "0 0 * * *",
      repeat_timezone: "UTC",
    });
  });

  it("refuses to start a queued job whose lock was taken again meanwhile: no second start", async () => {
    const [name] = await dueJobs("stale", 1);
    const { repo } = repository();
    const { job, run } = (await lockFor(repo, name as string)) as ClaimedRow;
    // its lock expired in the queue and another poll (here or elsewhere) locked the job again
    await db.pool.query("UPDATE agenda_jobs SET locked_at = now() WHERE name = $1", [name]);
    const newer = await lockedAt(name as string);
    await expect(repo.startRun(run, { ...job, lastRunAt: new Date() })).rejects.toBeInstanceOf(
      StaleStartError,
    );
    expect(await lockedAt(name as string)).toEqual(newer); // the newer lock is untouched
  });

  it("claims at most `limit` due jobs in one statement, most overdue first", async () => {
    const names = await dueJobs("room", 4);
    await db.pool.query(
      "UPDATE agenda_jobs SET next_run_at = now() - (substring(name from 6)::int + 1) * interval '1 minute' WHERE name LIKE 'room-%'",
    );
    const { repo } = repository();
    const claimed = await claim(repo, names, 2);
    expect(claimed.map(({ job }) => job.name)).toEqual([names[3], names[2]]);
    const { rows } = await db.pool.query<{ name: string }>(
      "SELECT name FROM agenda_jobs WHERE name LIKE 'room-%' AND locked_at IS NOT NULL ORDER BY name",
    );
    expect(rows.map((row) => row.name)).toEqual([names[2], names[3]]);
    // claimed jobs are not claimed again, and names held by this instance are left alone
    expect((await claim(repo, names, 10, [names[1] as string])).map(({ job }) => job.name)).toEqual([
      names[0],
    ]);
  });

  it("claims only the names it is given, and none that is not due within the look-ahead", async () => {
    const [due] = await dueJobs("given", 1);
    const [later] = await dueJobs("later", 1);
    await db.pool.query("UPDATE agenda_jobs SET next_run_at = now() + interval '5 seconds' WHERE name = $1", [
      later,
    ]);
    const { repo } = repository();
    expect(await claim(repo, ["unknown-name"], 10)).toEqual([]);
    expect(await claim(repo, [later as string], 10)).toEqual([]);
    expect((await claim(repo, [due as string, later as string], 10)).map(({ job }) => job.name)).toEqual([
      due,
    ]);
  });

  it("a claim of any name gives back, as it was, a job whose name this instance does not define", async () => {
    const [own, foreignDue, foreignDead] = await dueJobs("any", 3);
    await serverUpForALockLifetime();
    // a dead instance's lock, long expired: an instance that defines the task takes its run over
    const { rows: before } = await db.pool.query<{ locked_at: Date }>(
      "UPDATE agenda_jobs SET locked_at = now() - interval '1 hour', last_modified_by = 'dead' WHERE name = $1 RETURNING locked_at",
      [foreignDead],
    );
    const { repo } = repository();
    const givenBack: string[] = [];
    const now = new Date();
    const claimed = await repo.claimDue({
      names: null,
      skip: [],
      until: new Date(now.getTime() + 1000),
      limit: 100,
      owner: "test",
      now,
      runsHere: (name) => !name.startsWith("any-") || name === own,
      givenBack: (job) => givenBack.push(job.name),
    });
    expect(claimed.map(({ job }) => job.name)).toContain(own);
    expect(claimed.map(({ job }) => job.name)).not.toContain(foreignDue);
    expect(givenBack.sort()).toEqual([foreignDue, foreignDead].sort());
    const { rows } = await db.pool.query<{
      name: string;
      locked_at: Date | null;
      last_modified_by: string | null;
    }>("SELECT name, locked_at, last_modified_by FROM agenda_jobs WHERE name = ANY($1) ORDER BY name", [
      [foreignDue, foreignDead],
    ]);
    expect(rows).toEqual([
      { name: foreignDue, locked_at: null, last_modified_by: "setup" }, // as the engine created it
      { name: foreignDead, locked_at: before[0]?.locked_at, last_modified_by: "dead" },
    ]);
    for (const { job, run } of claimed)
      expect(run).toMatchObject({ jobId: String(job._id), taskName: job.name });
    // the others' jobs are due again for the next claim: nothing of theirs is held here
    await db.pool.query(
      "UPDATE agenda_jobs SET locked_at = NULL WHERE locked_at IS NOT NULL AND name <> $1",
      [foreignDead],
    );
  });

  it("offers a job again right after its run's end is saved, for its next slot within the look-ahead", async () => {
    const [name] = await dueJobs("refill", 1);
    const { repo } = repository();
    const { job, run } = (await lockFor(repo, name as string)) as ClaimedRow;
    await repo.startRun(run, { ...job, lastRunAt: new Date() });
    const nextSlot = new Date(Date.now() + 500);
    await repo.endRun(run, { ...job, nextRunAt: nextSlot, lastFinishedAt: new Date() });
    expect((await claim(repo, [name as string], 1)).map((claimed) => claimed.job.name)).toEqual([name]);
  });

  it("a re-timing computed before a run started does not name that run's slot again", async () => {
    // the reconcile reads its clock, then a run of the slot it is about to name starts (another
    // instance, a fast handler), then its statement lands: that slot would run twice
    const [name] = await dueJobs("retime", 1);
    const slot = new Date(Math.ceil(Date.now() / 1000) * 1000 + 5000);
    await db.pool.query("UPDATE agenda_jobs SET last_run_at = $2 WHERE name = $1", [name, slot]);
    const next = await engine.updateSchedule(
      name as string,
      "* * * * * *",
      "UTC",
      new Date(slot.getTime() - 500),
    );
    expect(next.getTime()).toBe(slot.getTime() + 1000);
    const { rows } = await db.pool.query(
      "SELECT next_run_at, repeat_interval FROM agenda_jobs WHERE name = $1",
      [name],
    );
    expect(rows[0]).toEqual({ next_run_at: next, repeat_interval: "* * * * * *" });
  });

  it("reads the engine's clock: the takeover hold after an outage ends when the clock passes it, and a re-run is due at the clock's now", async () => {
    const [name] = await dueJobs("hold", 1);
    // its owner died mid-run an hour ago; the dead run had already moved the next run ahead
    await db.pool.query(
      `UPDATE agenda_jobs SET locked_at = now() - interval '1 hour', last_run_at = now() - interval '1 hour',
              last_finished_at = NULL, next_run_at = now() + interval '1 hour' WHERE name = $1`,
      [name],
    );
    await serverUpForALockLifetime();
    const clock = new TestClock(Date.now());
    const repo = new CronwardenJobRepository(db.pool, logs.logger, {
      lockLifetimeMs: LOCK_LIFETIME_MS,
      clock,
    });
    const claimNow = () =>
      repo.claimDue({
        names: [name as string],
        skip: [],
        until: new Date(clock.now() + 1000),
        limit: 1,
        owner: "test",
        now: new Date(clock.now()),
      });
    repo.holdTakeovers(LOCK_LIFETIME_MS);
    expect(await claimNow()).toEqual([]); // held: no lock counts as expired right after an outage
    await clock.advance(LOCK_LIFETIME_MS + 1); // the clock passes the hold; no real time is waited
    const [taken] = await claimNow();
    expect(taken?.job.name).toBe(name);
    expect(taken?.job.nextRunAt?.getTime()).toBe(clock.now()); // the re-run is due at once, by the clock
    expect(taken?.run.previousRunUnfinished).toBe(true);
  });

  it("freeing a pre-locked job that lands late does not free another instance's lock", async () => {
    // Agenda frees a job it will not run without awaiting; held up by an outage, the statement can
    // land after the lock expired and another instance locked the job and started it
    const [name] = await dueJobs("unlock", 1);
    const { repo } = repository();
    const { job, run } = (await lockFor(repo, name as string)) as ClaimedRow;
    const { rows } = await db.pool.query<{ locked_at: Date }>(
      "UPDATE agenda_jobs SET locked_at = now() + interval '1 second' WHERE name = $1 RETURNING locked_at",
      [name],
    );
    await repo.release(run);
    expect(await lockedAt(name as string)).toEqual(rows[0]?.locked_at);
    const own = await lockFor(repository().repo, `${name}`);
    expect(own).toBeUndefined(); // still held
    await db.pool.query("UPDATE agenda_jobs SET locked_at = $2 WHERE name = $1", [name, job.lockedAt]);
    run.fenced(job.lockedAt); // its own lock, as the claim gave it
    await repo.release(run);
    expect(await lockedAt(name as string)).toBeNull(); // its own lock it frees
  });

  it("frees the jobs released together in one statement, each fenced on its own lock", async () => {
    const names = await dueJobs("release-many", 5);
    const releases: string[] = [];
    // counts the release statements the repository sends (the rest goes to the pool unchanged)
    const counting = new Proxy(db.pool, {
      get(target, property, receiver) {
        if (property !== "query") return Reflect.get(target, property, receiver);
        return (text: unknown, ...rest: unknown[]) => {
          if (typeof text === "string" && /SET locked_at = NULL/.test(text)) releases.push(text);
          return (target.query as (...args: unknown[]) => unknown).call(target, text, ...rest);
        };
      },
    });
    const repo = new CronwardenJobRepository(counting, logs.logger, {
      lockLifetimeMs: LOCK_LIFETIME_MS,
      clock: systemClock,
    });
    const jobs = await claim(repo, names, 5);
    expect(jobs.map(({ job }) => job.name).sort()).toEqual([...names].sort());
    // one of them was taken over meanwhile: its new owner's lock stays
    const takenOver = names[2] as string;
    const { rows } = await db.pool.query<{ locked_at: Date }>(
      "UPDATE agenda_jobs SET locked_at = now() + interval '1 second' WHERE name = $1 RETURNING locked_at",
      [takenOver],
    );
    await Promise.all(jobs.map(({ run }) => repo.release(run)));
    expect(releases).toHaveLength(1);
    for (const name of names)
      expect(await lockedAt(name)).toEqual(name === takenOver ? rows[0]?.locked_at : null);
  });

  // last: it disables every other job, since the share counts the whole table's due jobs
  it("past `atLeast`, claims no more than its share of the due jobs, counted among the registered instances", async () => {
    const names = await dueJobs("share", 6);
    await db.pool.query("UPDATE agenda_jobs SET disabled = TRUE WHERE name NOT LIKE 'share-%'");
    await db.pool.query("DELETE FROM cronwarden_instances");
    await db.pool.query(
      `INSERT INTO cronwarden_instances (instance_id, started_at, server_started_at)
         SELECT id, now(), pg_postmaster_start_time() FROM unnest(ARRAY['a', 'b', 'c']) AS id`,
    );
    const shareOf = (repo: CronwardenJobRepository, share: { atLeast: number; held: number }) => {
      const now = new Date();
      return repo.claimDue({ names, skip: [], until: now, limit: 10, owner: "test", now, share });
    };
    try {
      const first = repository().repo;
      // 6 due among 3 instances: 2
      expect(await shareOf(first, { atLeast: 0, held: 0 })).toHaveLength(2);
      // the due jobs it holds count in its share (they are due, locked or not): none more
      expect(await shareOf(first, { atLeast: 0, held: 2 })).toHaveLength(0);
      // at least `atLeast`, past the share
      expect(await shareOf(repository().repo, { atLeast: 3, held: 0 })).toHaveLength(3);
      // without a share, `limit` alone: the one left
      expect(await claim(repository().repo, names, 10)).toHaveLength(1);
    } finally {
      await db.pool.query("DELETE FROM cronwarden_instances");
    }
  });
});

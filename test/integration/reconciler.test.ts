import { Job } from "agenda";
import pg from "pg";
import { afterAll, beforeAll, beforeEach, describe, expect, it, vi } from "vitest";
import type { DesiredState, DesiredTask } from "../../src/config/desiredState.js";
import { AgendaEngine } from "../../src/engine/agendaEngine.js";
import { RECONCILE_LOCK_KEY } from "../../src/engine/sql.js";
import { ConfigReconciler, type ReconcileTarget } from "../../src/reconcile/configReconciler.js";
import { TaskRegistry } from "../../src/scheduler/taskRegistry.js";
import type { AuditEntry } from "../../src/store/auditLog.js";
import { DesiredStateStore } from "../../src/store/desiredStateStore.js";
import { createTestDatabase, type TestDatabase } from "../helpers/database.js";
import { LogCapture } from "../helpers/logs.js";

/** Each reconcile rule against Agenda's own table (no workers running). */

let db: TestDatabase;
let engine: AgendaEngine;
let reconciler: ConfigReconciler;
let logs: LogCapture;
const now = () => new Date();

function state(tasks: Array<Partial<DesiredTask> & { name: string }>, revision = "r"): DesiredState {
  return {
    tasks: tasks.map((task) => ({ enabled: true, cron: "*/5 * * * *", timezone: "UTC", ...task })),
    rejected: [],
    source: "test",
    revision,
    document: null,
    confirmDisableAll: false,
  };
}

async function row(name: string) {
  const result = await db.pool.query(
    "SELECT id, disabled, repeat_interval, repeat_timezone, next_run_at, type, updated_at FROM agenda_jobs WHERE name = $1",
    [name],
  );
  return result.rows;
}

beforeAll(async () => {
  db = await createTestDatabase();
  logs = new LogCapture();
  const registry = new TaskRegistry();
  for (const name of ["report", "cleanup", "digest"]) registry.register({ name, handler: async () => {} });
  engine = new AgendaEngine({
    pool: db.pool,
    instanceId: "test",
    processEveryMs: 1000,
    lockLifetimeMs: 60_000,
    logger: logs.logger,
  });
  await engine.prepare();
  reconciler = new ConfigReconciler({ target: engine, registry, logger: logs.logger, now });
});

afterAll(async () => {
  await db?.drop();
});

beforeEach(async () => {
  await db.pool.query("DELETE FROM agenda_jobs");
});

describe("ConfigReconciler against Agenda's table", () => {
  it("creates one single job per task, its next run the next slot after now", async () => {
    const before = new Date();
    // the next slot is the engine's (src/core/policies/schedule.ts); Agenda's computation, which
    // it would overwrite, is not made (at 10,000 new jobs it was most of a start's garbage)
    const agendas = vi.spyOn(Job.prototype as unknown as { computeNextRunAt(): unknown }, "computeNextRunAt");
    try {
      await reconciler.reconcile(state([{ name: "report", cron: "0 9 * * *", timezone: "Asia/Shanghai" }]));
      expect(agendas).not.toHaveBeenCalled();
    } finally {
      agendas.mockRestore();
    }
    const [job, ...others] = await row("report");
    expect(others).toEqual([]);
    expect(job).toMatchObject({
      type: "single",
      disabled: false,
      repeat_interval: "0 9 * * *",
      repeat_timezone: "Asia/Shanghai",
    });
    const next: Date = job.next_run_at;
    expect(next.getTime()).toBeGreaterThan(before.getTime());
    expect(next.getUTCHours()).toBe(1); // 09:00 in Shanghai
    expect(next.getTime() - before.getTime()).toBeLessThanOrEqual(24 * 3600_000);
  });

  it("creates a job disabled when the config says enabled: false", async () => {
    await reconciler.reconcile(state([{ name: "report", enabled: false }]));
    expect(await row("report")).toEqual([expect.objectContaining({ disabled: true })]);
  });

  it("disables and re-enables the same row, never deleting it", async () => {
    await reconciler.reconcile(state([{ name: "report" }]));
    const [created] = await row("report");
    await reconciler.reconcile(state([{ name: "report", enabled: false }]));
    expect(await row("report")).toEqual([expect.objectContaining({ id: created.id, disabled: true })]);
    await reconciler.reconcile(state([{ name: "report", enabled: true }]));
    expect(await row("report")).toEqual([expect.objectContaining({ id: created.id, disabled: false })]);
  });

  it("changes cron and timezone in place: same row, next run from now in the new timezone", async () => {
    await reconciler.reconcile(state([{ name: "report", cron: "*/5 * * * *" }]));
    const [created] = await row("report");
    // a last run long ago: Agenda's repeatEvery() would compute from it and land in the past
    await db.pool.query(
      "UPDATE agenda_jobs SET last_run_at = now() - interval '3 days' WHERE name = 'report'",
    );
    const before = new Date();
    await reconciler.reconcile(state([{ name: "report", cron: "30 8 * * *", timezone: "America/New_York" }]));
    const [updated] = await row("report");
    expect(updated).toMatchObject({
      id: created.id,
      repeat_interval: "30 8 * * *",
      repeat_timezone: "America/New_York",
    });
    const next: Date = updated.next_run_at;
    expect(next.getTime()).toBeGreaterThan(before.getTime());
    const local = new Intl.DateTimeFormat("en-GB", {
      timeZone: "America/New_York",
      hour: "2-digit",
      minute: "2-digit",
      hour12: false,
    }).format(next);
    expect(local).toBe("08:30");
  });

  it("a registered task missing from the config is disabled, not deleted", async () => {
    await reconciler.reconcile(state([{ name: "report" }, { name: "cleanup" }]));
    await reconciler.reconcile(state([{ name: "report" }]));
    expect(await row("cleanup")).toEqual([expect.objectContaining({ disabled: true })]);
  });

  it("leaves a job row of an unregistered task untouched and reports it", async () => {
    await db.pool.query(
      "INSERT INTO agenda_jobs (name, type, repeat_interval, next_run_at, data) VALUES ('retiredTask', 'single', '* * * * *', now(), '{}')",
    );
    const [before] = await row("retiredTask");
    const result = await reconciler.reconcile(state([{ name: "report" }]));
    expect(await row("retiredTask")).toEqual([before]);
    expect(result.plan.actions).toContainEqual(
      expect.objectContaining({ kind: "orphan", task: "retiredTask" }),
    );
    expect(logs.find((line) => line.action === "orphan" && line.task === "retiredTask")).toBeDefined();
  });

  it("rejects an unknown name with a logged error and applies the other entries", async () => {
    await reconciler.reconcile(state([{ name: "reprot" }, { name: "digest" }]));
    expect(await row("reprot")).toEqual([]);
    expect(await row("digest")).toHaveLength(1);
    const error = logs.find((line) => line.action === "reject" && line.task === "reprot");
    expect(error?.msg).toMatch(/config entry "reprot" is rejected: no task of that name is registered/);
  });

  it("repairs an enabled job whose next run was lost", async () => {
    await reconciler.reconcile(state([{ name: "report" }]));
    await db.pool.query("UPDATE agenda_jobs SET next_run_at = NULL WHERE name = 'report'");
    await reconciler.reconcile(state([{ name: "report" }], "r2"));
    const [job] = await row("report");
    expect(job.next_run_at).toBeInstanceOf(Date);
  });

  it("an anti-entropy pass with the rows' digest unchanged answers the converged plan without reading the rows or taking the lock; drift is still repaired", async () => {
    let rowReads = 0;
    let locks = 0;
    const counted = new Proxy(engine, {
      get(target, property) {
        if (property === "listJobs") rowReads += 1;
        if (property === "withReconcileLock") locks += 1;
        const value = Reflect.get(target, property, target);
        return typeof value === "function" ? value.bind(target) : value;
      },
    });
    const registry = new TaskRegistry();
    for (const name of ["report", "cleanup"]) registry.register({ name, handler: async () => {} });
    const watched = new ConfigReconciler({ target: counted, registry, logger: logs.logger, now });
    const desired = state([
      { name: "report", cron: "0 9 * * *" },
      { name: "cleanup", enabled: false },
    ]);
    const applying = await watched.reconcile(desired, "config");
    expect(applying.applied).toHaveLength(2);
    // the change's pass reads the rows once more after applying: nothing left to apply, converged
    expect(rowReads).toBe(2);
    expect(watched.lastResult).toBe(applying);
    expect(locks).toBe(1);
    expect((await watched.reconcile(desired, "anti-entropy")).applied).toEqual([]);
    expect(rowReads).toBe(2);
    expect(locks).toBe(1); // the digest alone: no lock, no write

    // runs move the run columns: not what the planner reads, no read
    await db.pool.query(
      "UPDATE agenda_jobs SET last_run_at = now(), locked_at = now(), next_run_at = next_run_at + interval '1 day'",
    );
    const answered = await watched.reconcile(desired, "anti-entropy");
    expect(rowReads).toBe(2);
    expect(answered).toMatchObject({ trigger: "anti-entropy", applied: [] });
    expect([...answered.plan.unchanged].sort()).toEqual(["cleanup", "report"]);
    expect([...answered.enabledTasks]).toEqual(["report"]);
    expect(watched.lastResult).toBe(answered);

    // a row edited by hand: read, planned and repaired
    await db.pool.query("UPDATE agenda_jobs SET repeat_interval = '0 3 * * *' WHERE name = 'report'");
    const repaired = await watched.reconcile(desired, "anti-entropy");
    expect(rowReads).toBe(4); // the repair, then the read after it
    expect(locks).toBe(2); // a repair writes under the lock
    expect(repaired.applied).toEqual([expect.objectContaining({ kind: "update", task: "report" })]);
    expect((await row("report"))[0]).toMatchObject({ repeat_interval: "0 9 * * *" });
    expect((await watched.reconcile(desired, "anti-entropy")).applied).toEqual([]);
    expect(rowReads).toBe(4); // converged again
    // so are a lost next run and an enabled flag edited in the row
    await db.pool.query("UPDATE agenda_jobs SET next_run_at = NULL WHERE name = 'report'");
    expect((await watched.reconcile(desired, "anti-entropy")).applied).toHaveLength(1);
    expect((await row("report"))[0]?.next_run_at).toBeInstanceOf(Date);
    await db.pool.query("UPDATE agenda_jobs SET disabled = false WHERE name = 'cleanup'");
    expect((await watched.reconcile(desired, "anti-entropy")).applied).toEqual([
      expect.objectContaining({ kind: "disable", task: "cleanup" }),
    ]);
    // a new desired state is always read and planned
    const reads = rowReads;
    await watched.reconcile(
      state([
        { name: "report", cron: "0 9 * * *" },
        { name: "cleanup", enabled: false },
      ]),
      "anti-entropy",
    );
    expect(rowReads).toBe(reads + 1);
  });

  it("a failed read after applying leaves the change applied and reported; the next anti-entropy pass reads the rows", async () => {
    let rowReads = 0;
    const flaky = new Proxy(engine, {
      get(target, property) {
        if (property === "listJobs")
          return async () => {
            rowReads += 1;
            if (rowReads === 2) throw new Error("connection terminated");
            return target.listJobs();
          };
        const value = Reflect.get(target, property, target);
        return typeof value === "function" ? value.bind(target) : value;
      },
    });
    const registry = new TaskRegistry();
    registry.register({ name: "report", handler: async () => {} });
    const watched = new ConfigReconciler({ target: flaky, registry, logger: logs.logger, now });
    const desired = state([{ name: "report", cron: "0 9 * * *" }]);
    const applying = await watched.reconcile(desired, "config");
    expect(applying.applied).toEqual([expect.objectContaining({ kind: "create", task: "report" })]);
    expect(watched.lastResult).toBe(applying);
    expect(
      logs.find((line) => /the read after applying a reconcile failed/.test(String(line.msg))),
    ).toMatchObject({
      level: 40,
    });
    expect(rowReads).toBe(2);
    expect((await watched.reconcile(desired, "anti-entropy")).applied).toEqual([]);
    expect(rowReads).toBe(3);
  });

  it("reconciles waiting for the lock hold no connection: four on a pool of three all finish", async () => {
    const small = new pg.Pool({ connectionString: db.url, max: 3 });
    const holder = await db.pool.connect();
    try {
      const registry = new TaskRegistry();
      registry.register({ name: "report", handler: async () => {} });
      const shared = new AgendaEngine({
        pool: small,
        instanceId: "small-pool",
        processEveryMs: 1000,
        lockLifetimeMs: 60_000,
        logger: logs.logger,
      });
      await shared.prepare();
      // another instance's reconcile holds the lock while these four ask for it
      await holder.query("SELECT pg_advisory_lock($1)", [RECONCILE_LOCK_KEY]);
      const passes = [1, 2, 3, 4].map((n) =>
        new ConfigReconciler({ target: shared, registry, logger: logs.logger, now }).reconcile(
          state([{ name: "report", cron: "0 9 * * *" }], `r${n}`),
        ),
      );
      await new Promise((resolve) => setTimeout(resolve, 300));
      await holder.query("SELECT pg_advisory_unlock($1)", [RECONCILE_LOCK_KEY]);
      // a waiter holding a connection would leave the lock's winner none for its work: a hang
      const results = await Promise.all(passes);
      expect(results.flatMap((result) => result.applied).map((action) => action.kind)).toEqual(["create"]);
      expect(await row("report")).toHaveLength(1);
    } finally {
      holder.release();
      await small.end();
    }
  });

  it("serializes concurrent reconciles in the database: they converge on one row per task", async () => {
    const registry = new TaskRegistry();
    for (const name of ["report", "cleanup", "digest"]) registry.register({ name, handler: async () => {} });
    const others = await Promise.all(
      [1, 2, 3].map(async (n) => {
        const other = new AgendaEngine({
          pool: db.pool,
          instanceId: `peer${n}`,
          processEveryMs: 1000,
          lockLifetimeMs: 60_000,
          logger: logs.logger,
        });
        await other.prepare();
        return new ConfigReconciler({ target: other, registry, logger: logs.logger, now });
      }),
    );
    const desired = state([
      { name: "report", cron: "0 * * * *" },
      { name: "cleanup", enabled: false },
      { name: "digest" },
    ]);
    const results = await Promise.all([reconciler, ...others].map((peer) => peer.reconcile(desired)));
    const counts = await db.pool.query(
      "SELECT name, count(*)::int AS n FROM agenda_jobs GROUP BY name ORDER BY name",
    );
    expect(counts.rows).toEqual([
      { name: "cleanup", n: 1 },
      { name: "digest", n: 1 },
      { name: "report", n: 1 },
    ]);
    // exactly one of the four did the work; the others found nothing left to change
    expect(results.map((result) => result.applied.length).sort()).toEqual([0, 0, 0, 3]);
  });

  it("audits the changes it applied when a later one fails, then reports the failure", async () => {
    const audited: AuditEntry[] = [];
    const failing: ReconcileTarget = {
      instanceId: engine.instanceId,
      withReconcileLock: (work) => engine.withReconcileLock(work),
      listJobs: () => engine.listJobs(),
      updateSchedule: (...args) => engine.updateSchedule(...args),
      setEnabled: (...args) => engine.setEnabled(...args),
      setPolicy: (...args) => engine.setPolicy(...args),
      setJitter: (...args) => engine.setJitter(...args),
      setOverlap: (...args) => engine.setOverlap(...args),
      setPauseOnFailure: (...args) => engine.setPauseOnFailure(...args),
      setExclude: (...args) => engine.setExclude(...args),
      resume: (taskName, enabled) => engine.resume(taskName, enabled),
      setDependency: (...args) => engine.setDependency(...args),
      createJob: async (taskName, ...rest) => {
        if (taskName === "digest") throw new Error("database went away");
        await engine.createJob(taskName, ...rest);
      },
    };
    const registry = new TaskRegistry();
    for (const name of ["report", "cleanup", "digest"]) registry.register({ name, handler: async () => {} });
    const partial = new ConfigReconciler({
      target: failing,
      registry,
      logger: logs.logger,
      now,
      recorder: {
        recordAudit: async (entries) => {
          audited.push(...entries);
        },
        saveApplied: async () => {},
      },
    });
    await expect(
      partial.reconcile(state([{ name: "report" }, { name: "cleanup" }, { name: "digest" }])),
    ).rejects.toThrow("database went away");
    expect(await row("report")).toHaveLength(1);
    expect(await row("cleanup")).toHaveLength(1);
    expect([...new Set(audited.map((entry) => entry.task))].sort()).toEqual(["cleanup", "report"]);
  });

  it("writes in batches the same rows as one at a time: create, re-time, disable", async () => {
    /** The reconciler's target without the batch writes: every action one row at a time. */
    const oneByOne: ReconcileTarget = {
      instanceId: engine.instanceId,
      withReconcileLock: (work) => engine.withReconcileLock(work),
      listJobs: () => engine.listJobs(),
      createJob: (...args) => engine.createJob(...args),
      updateSchedule: (...args) => engine.updateSchedule(...args),
      setEnabled: (...args) => engine.setEnabled(...args),
      setPolicy: (...args) => engine.setPolicy(...args),
      setJitter: (...args) => engine.setJitter(...args),
      setOverlap: (...args) => engine.setOverlap(...args),
      setPauseOnFailure: (...args) => engine.setPauseOnFailure(...args),
      setExclude: (...args) => engine.setExclude(...args),
      resume: (taskName, enabled) => engine.resume(taskName, enabled),
      setDependency: (...args) => engine.setDependency(...args),
    };
    const fixed = () => new Date("2030-01-01T00:00:00.000Z");
    const registry = (name: string) => {
      const names = new TaskRegistry();
      names.register({ name, handler: async () => {} });
      return names;
    };
    const batched = new ConfigReconciler({
      target: engine,
      registry: registry("report"),
      logger: logs.logger,
      now: fixed,
    });
    const single = new ConfigReconciler({
      target: oneByOne,
      registry: registry("cleanup"),
      logger: logs.logger,
      now: fixed,
    });
    const rows = async () => {
      const result = await db.pool.query<{ name: string; row: Record<string, unknown> }>(
        `SELECT name, to_jsonb(job) - 'id' - 'name' - 'created_at' - 'updated_at' AS row
           FROM agenda_jobs AS job WHERE name IN ('report', 'cleanup')`,
      );
      return Object.fromEntries(result.rows.map((each) => [each.name, each.row]));
    };
    const steps = [
      // created from the engine's clock (a yearly slot: both rows get the same next run), then re-timed from `fixed`
      { cron: "0 9 1 1 *", timezone: "Asia/Shanghai", enabled: false },
      { cron: "*/7 * * * *", timezone: "Europe/Paris", enabled: false },
      { cron: "*/7 * * * *", timezone: "Europe/Paris", enabled: true },
      { cron: "15 minutes", timezone: "UTC", enabled: true },
    ];
    for (const [step, task] of steps.entries()) {
      const [one, other] = await Promise.all([
        batched.reconcile(state([{ name: "report", ...task }], `r${step}`)),
        single.reconcile(state([{ name: "cleanup", ...task }], `r${step}`)),
      ]);
      expect(one.applied.map((action) => action.kind)).toEqual(other.applied.map((action) => action.kind));
      const { report, cleanup } = await rows();
      expect(report).toBeDefined();
      expect(report).toEqual(cleanup);
    }
    const created = (task: string) =>
      String(logs.lines.findLast((entry) => entry.task === task && entry.action === "create")?.msg);
    expect(created("report")).toBe(created("cleanup").replace("cleanup", "report"));
  });

  it("a batch that fails leaves the batches before it applied and audited", async () => {
    const audited: AuditEntry[] = [];
    const registry = new TaskRegistry();
    const names = Array.from({ length: 2_500 }, (_, index) => `bulk${index}`);
    for (const name of names) registry.register({ name, handler: async () => {} });
    let calls = 0;
    const failing: ReconcileTarget = {
      instanceId: engine.instanceId,
      withReconcileLock: (work) => engine.withReconcileLock(work),
      listJobs: () => engine.listJobs(),
      createJob: (...args) => engine.createJob(...args),
      updateSchedule: (...args) => engine.updateSchedule(...args),
      setEnabled: (...args) => engine.setEnabled(...args),
      setPolicy: (...args) => engine.setPolicy(...args),
      setJitter: (...args) => engine.setJitter(...args),
      setOverlap: (...args) => engine.setOverlap(...args),
      setPauseOnFailure: (...args) => engine.setPauseOnFailure(...args),
      setExclude: (...args) => engine.setExclude(...args),
      resume: (taskName, enabled) => engine.resume(taskName, enabled),
      setDependency: (...args) => engine.setDependency(...args),
      createJobs: async (jobs) => {
        calls++;
        if (calls > 1) throw new Error("database went away");
        return engine.createJobs(jobs);
      },
      updateSchedules: (changes, at) => engine.updateSchedules(changes, at),
      setEnabledMany: (changes) => engine.setEnabledMany(changes),
    };
    const partial = new ConfigReconciler({
      target: failing,
      registry,
      logger: logs.logger,
      now,
      recorder: {
        recordAudit: async (entries) => {
          audited.push(...entries);
        },
        saveApplied: async () => {},
      },
    });
    await expect(partial.reconcile(state(names.map((name) => ({ name }))))).rejects.toThrow(
      "database went away",
    );
    const stored = await db.pool.query<{ count: string }>("SELECT count(*) FROM agenda_jobs");
    const created = new Set(audited.filter((entry) => entry.field === "job").map((entry) => entry.task));
    expect(Number(stored.rows[0]?.count)).toBe(created.size);
    expect(created.size).toBeGreaterThan(0);
    expect(created.size).toBeLessThan(names.length);
  });

  it("a config change of a few entries reads and plans only their rows; after drift, every row", async () => {
    const tasks = [{ name: "report" }, { name: "cleanup" }, { name: "digest" }];
    await reconciler.reconcile(state(tasks, "s1"));
    const full = vi.spyOn(engine, "listJobs");
    const named = vi.spyOn(engine, "listJobsNamed");
    try {
      const edited = await reconciler.reconcile(
        state([{ name: "report", cron: "0 * * * *" }, { name: "cleanup" }, { name: "digest" }], "s2"),
      );
      expect(full).not.toHaveBeenCalled();
      expect(named.mock.calls).toEqual([[["report"]]]);
      expect(edited.applied).toEqual([expect.objectContaining({ kind: "update", task: "report" })]);
      expect(edited.plan.unchanged.sort()).toEqual(["cleanup", "digest"]);
      expect((await row("report"))[0]).toMatchObject({ repeat_interval: "0 * * * *" });
      // a task left out of the config is disabled by a pass of it alone
      named.mockClear();
      const s3 = state([{ name: "report", cron: "0 * * * *" }, { name: "cleanup" }], "s3");
      const removed = await reconciler.reconcile(s3);
      expect(full).not.toHaveBeenCalled();
      expect(named.mock.calls).toEqual([[["digest"]]]);
      expect(removed.applied).toEqual([expect.objectContaining({ kind: "disable", task: "digest" })]);
      expect(removed.enabledTasks).toEqual(new Set(["report", "cleanup"]));
      // the anti-entropy pass that follows (of the snapshot in force) answers from the digest kept after those writes
      await reconciler.reconcile(s3, "anti-entropy");
      expect(full).not.toHaveBeenCalled();
      // drift by hand on another row: the rows' digest is not the converged one, every row is planned
      await db.pool.query("UPDATE agenda_jobs SET disabled = TRUE WHERE name = 'cleanup'");
      const again = await reconciler.reconcile(
        state([{ name: "report", cron: "0 9 * * *" }, { name: "cleanup" }], "s4"),
      );
      expect(full).toHaveBeenCalled();
      expect(again.applied.map((action) => [action.kind, action.task]).sort()).toEqual([
        ["enable", "cleanup"],
        ["update", "report"],
      ]);
    } finally {
      full.mockRestore();
      named.mockRestore();
    }
  });

  it("an instance that finds the rows as another instance's converged pass of the same snapshot left them plans its changed entries alone; drift is still planned in full", async () => {
    await db.pool.query("DELETE FROM cronwarden_desired_state");
    const store = new DesiredStateStore(db.pool, "shared");
    const registry = new TaskRegistry();
    for (const name of ["report", "cleanup", "digest"]) registry.register({ name, handler: async () => {} });
    const instance = () =>
      new ConfigReconciler({
        target: engine,
        registry,
        logger: logs.logger,
        now,
        recorder: {
          recordAudit: async () => {},
          saveApplied: (desired, appliedBy) => store.save({ ...desired, appliedBy }),
          converged: store,
        },
      });
    const [a, b] = [instance(), instance()];
    const tasks = [{ name: "report" }, { name: "cleanup" }, { name: "digest" }];
    await a.reconcile(state(tasks, "m1"));
    await b.reconcile(state(tasks, "m1"));
    const full = vi.spyOn(engine, "listJobs");
    const named = vi.spyOn(engine, "listJobsNamed");
    try {
      // a applies the edit; b, seeing the rows' digest changed by a's writes, reads the edited row alone
      const s2 = state(
        [{ name: "report", cron: "0 * * * *" }, { name: "cleanup" }, { name: "digest" }],
        "m2",
      );
      expect((await a.reconcile(s2)).applied).toEqual([
        expect.objectContaining({ kind: "update", task: "report" }),
      ]);
      named.mockClear();
      const followed = await b.reconcile(s2);
      expect(full).not.toHaveBeenCalled();
      expect(named.mock.calls).toEqual([[["report"]]]);
      expect(followed.applied).toEqual([]);
      expect(followed.enabledTasks).toEqual(new Set(["report", "cleanup", "digest"]));
      // and its next anti-entropy pass answers from the digest, as a's does
      await b.reconcile(s2, "anti-entropy");
      await a.reconcile(s2, "anti-entropy");
      expect(full).not.toHaveBeenCalled();
      // a record of another revision is not trusted: b, still at m2, meets a's rows of m3 and plans every row
      const s3 = state(
        [{ name: "report", cron: "0 9 * * *" }, { name: "cleanup" }, { name: "digest" }],
        "m3",
      );
      await a.reconcile(s3);
      expect(full).not.toHaveBeenCalled();
      await b.reconcile(state([{ name: "report", cron: "0 * * * *" }, { name: "cleanup" }], "m2b"));
      expect(full).toHaveBeenCalled();
      // drift by hand after a converged pass: the rows' digest is no record's, every row is planned and repaired
      await a.reconcile(s3);
      full.mockClear();
      await db.pool.query("UPDATE agenda_jobs SET disabled = TRUE WHERE name = 'cleanup'");
      const repaired = await a.reconcile(
        state([{ name: "report", cron: "0 10 * * *" }, { name: "cleanup" }, { name: "digest" }], "m4"),
      );
      expect(full).toHaveBeenCalled();
      expect(repaired.applied.map((action) => [action.kind, action.task]).sort()).toEqual([
        ["enable", "cleanup"],
        ["update", "report"],
      ]);
    } finally {
      full.mockRestore();
      named.mockRestore();
    }
  });

  it("after a failed pass the next config change plans every row again", async () => {
    const tasks = [{ name: "report" }, { name: "cleanup" }];
    await reconciler.reconcile(state(tasks, "f1"));
    const failing = vi
      .spyOn(engine, "updateSchedules")
      .mockRejectedValueOnce(new Error("database went away"));
    const full = vi.spyOn(engine, "listJobs");
    try {
      await expect(
        reconciler.reconcile(state([{ name: "report", cron: "0 * * * *" }, { name: "cleanup" }], "f2")),
      ).rejects.toThrow("database went away");
      full.mockClear();
      const retried = await reconciler.reconcile(
        state([{ name: "report", cron: "0 * * * *" }, { name: "cleanup" }], "f2"),
      );
      expect(full).toHaveBeenCalled();
      expect(retried.applied).toEqual([expect.objectContaining({ kind: "update", task: "report" })]);
    } finally {
      failing.mockRestore();
      full.mockRestore();
    }
  });
});

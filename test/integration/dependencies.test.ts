import { describe, expect, it } from "vitest";
import { runCli } from "../../src/cli/main.js";
import { createAdminServer, createMetrics, type TaskContext } from "../../src/index.js";
import { parsePrometheus, sample } from "../helpers/admin.js";
import { harnessSuite, pollUntil, SchedulerHarness, yamlOf } from "../helpers/harness.js";

/**
 * Task dependencies in one process against a real PostgreSQL (docs/dependencies.md). Every figure
 * asserted is read from the database's record: the run log and the waits table.
 */

const suite = harnessSuite();
const db = () => suite.db();

interface OutcomeRow {
  slot: string;
  outcome: string;
  detail: string | null;
  upstreams: { name: string; runKey: string; outcome: string }[] | null;
}

async function outcomes(task: string): Promise<OutcomeRow[]> {
  const result = await db().pool.query<OutcomeRow>(
    `SELECT meta->>'scheduledAt' AS slot, meta->>'outcome' AS outcome, meta->>'detail' AS detail,
            meta->'upstreams' AS upstreams
       FROM agenda_logs WHERE job_name = $1 AND event IN ('success', 'fail') ORDER BY timestamp`,
    [task],
  );
  return result.rows;
}

async function waitRow(task: string, slot: string) {
  const result = await db().pool.query(
    "SELECT * FROM cronwarden_dependency_waits WHERE task = $1 AND slot = $2",
    [task, slot],
  );
  return result.rows[0];
}

const EVERY_2S = "*/2 * * * * *";
const NEVER_SOON = "0 0 1 1 *";

describe("task dependencies", () => {
  it("fan-in: C runs once for its upstreams' slot, with both upstream run keys in its context", async () => {
    const contexts: TaskContext[] = [];
    await suite.start(
      [
        { name: "fan-a", handler: async () => {} },
        { name: "fan-b", handler: async () => {} },
        { name: "fan-c", handler: async (ctx) => void contexts.push(ctx) },
      ],
      [
        { name: "fan-a", cron: EVERY_2S },
        { name: "fan-b", cron: EVERY_2S },
        { name: "fan-c", after: ["fan-a", "fan-b"] },
      ],
    );
    const [first] = await pollUntil("a run of fan-c", async () => {
      const rows = await outcomes("fan-c");
      return rows.length > 0 ? rows : undefined;
    });
    if (!first) throw new Error("no run of fan-c");
    expect(first.outcome).toBe("succeeded");
    const slot = first.slot;
    const upstreamOutcomes = [...(await outcomes("fan-a")), ...(await outcomes("fan-b"))].filter(
      (row) => row.slot === slot,
    );
    expect(upstreamOutcomes.map((row) => row.outcome)).toEqual(["succeeded", "succeeded"]);
    expect(first.upstreams?.map((run) => run.runKey).sort()).toEqual([`fan-a@${slot}`, `fan-b@${slot}`]);
    const context = contexts.find((ctx) => ctx.scheduledAt.toISOString() === slot);
    expect(context?.upstreams.map((run) => run.runKey).sort()).toEqual([`fan-a@${slot}`, `fan-b@${slot}`]);
    expect(context?.upstreams.every((run) => run.outcome === "succeeded")).toBe(true);
    expect(context?.runKey).toBe(`fan-c@${slot}`);
    // once for the slot, per the record
    await pollUntil("the next slot of fan-c", async () => (await outcomes("fan-c")).length >= 2 || undefined);
    expect((await outcomes("fan-c")).filter((row) => row.slot === slot)).toHaveLength(1);
    expect(await waitRow("fan-c", slot)).toMatchObject({ state: "ran", outcome: "succeeded" });
  });

  it("an upstream failing after its retries skips the downstream (allSucceeded); allDone runs it", async () => {
    await suite.start(
      [
        {
          name: "fail-a",
          retry: { maxRetries: 1, delayMs: 100 },
          handler: async () => {
            throw new Error("source unavailable");
          },
        },
        { name: "fail-c", handler: async () => {} },
        { name: "fail-done", handler: async () => {} },
      ],
      [
        { name: "fail-a", cron: EVERY_2S },
        { name: "fail-c", after: ["fail-a"] },
        { name: "fail-done", after: ["fail-a"], when: "allDone" },
      ],
    );
    const [skipped] = await pollUntil("fail-c decided", async () => {
      const rows = await outcomes("fail-c");
      return rows.length > 0 ? rows : undefined;
    });
    expect(skipped).toMatchObject({ outcome: "skipped", detail: "upstream fail-a failed" });
    // after the retry: the upstream's final outcome is the failure of its second attempt
    const retries = await db().pool.query(
      `SELECT count(*)::int AS n FROM agenda_logs WHERE job_name = 'fail-a' AND event = 'retry' AND meta->>'scheduledAt' = $1`,
      [skipped?.slot],
    );
    expect(retries.rows[0].n).toBe(1);
    const [ran] = await pollUntil("fail-done decided", async () => {
      const rows = await outcomes("fail-done");
      return rows.length > 0 ? rows : undefined;
    });
    expect(ran).toMatchObject({ outcome: "succeeded" });
    expect(ran?.upstreams).toEqual([{ name: "fail-a", runKey: `fail-a@${ran?.slot}`, outcome: "failed" }]);
  });

  it("a disabled upstream skips the slot: upstream X disabled", async () => {
    await suite.start(
      [
        { name: "dis-a", handler: async () => {} },
        { name: "dis-b", handler: async () => {} },
        { name: "dis-c", handler: async () => {} },
      ],
      [
        { name: "dis-a", cron: EVERY_2S },
        { name: "dis-b", cron: EVERY_2S, enabled: false },
        { name: "dis-c", after: ["dis-a", "dis-b"] },
      ],
    );
    const [skipped] = await pollUntil("dis-c decided", async () => {
      const rows = await outcomes("dis-c");
      return rows.length > 0 ? rows : undefined;
    });
    expect(skipped).toMatchObject({ outcome: "skipped", detail: "upstream dis-b disabled" });
    expect(await waitRow("dis-c", skipped?.slot as string)).toMatchObject({
      state: "skipped",
      skip_kind: "upstream_disabled",
    });
  });

  it("waitAtMost passing while the upstream runs skips the slot; the upstream's end does not run it later", async () => {
    let release: () => void = () => {};
    const released = new Promise<void>((resolve) => {
      release = resolve;
    });
    const h = await suite.start(
      [
        { name: "slow-a", handler: () => released },
        { name: "slow-c", handler: async () => {} },
      ],
      [
        { name: "slow-a", cron: EVERY_2S },
        { name: "slow-c", after: ["slow-a"], waitAtMost: "1s" },
      ],
    );
    const [skipped] = await pollUntil("slow-c skipped", async () => {
      const rows = await outcomes("slow-c");
      return rows.length > 0 ? rows : undefined;
    });
    expect(skipped).toMatchObject({ outcome: "skipped", detail: "upstream not done within 1s" });
    const slot = skipped?.slot as string;
    expect((await outcomes("slow-a")).filter((row) => row.slot === slot)).toHaveLength(0); // still running
    release();
    await pollUntil("slow-a's outcome", async () =>
      (await outcomes("slow-a")).some((row) => row.slot === slot) ? true : undefined,
    );
    for (let sweep = 0; sweep < 5; sweep++) await h.scheduler.sweepDependencies(); // the 5th re-decides open waits
    expect(await waitRow("slow-c", slot)).toMatchObject({ state: "skipped" });
    expect((await outcomes("slow-c")).filter((row) => row.slot === slot)).toEqual([
      expect.objectContaining({ outcome: "skipped" }),
    ]);
  });

  it("removing a dependency closes the open wait as skipped, and is audited", async () => {
    let release: () => void = () => {};
    const released = new Promise<void>((resolve) => {
      release = resolve;
    });
    const h = await suite.start(
      [
        { name: "rm-a", handler: () => released },
        { name: "rm-c", handler: async () => {} },
      ],
      [
        { name: "rm-a", cron: EVERY_2S },
        { name: "rm-c", after: ["rm-a"] },
      ],
    );
    const open = await pollUntil("rm-c waiting", async () => {
      const result = await db().pool.query(
        "SELECT * FROM cronwarden_dependency_waits WHERE task = 'rm-c' AND state = 'waiting'",
      );
      return result.rows[0];
    });
    await h.writeConfig([
      { name: "rm-a", cron: EVERY_2S },
      { name: "rm-c", cron: NEVER_SOON },
    ]);
    const closed = await waitRow("rm-c", open.slot.toISOString());
    expect(closed).toMatchObject({ state: "skipped", skip_kind: "dependency_removed" });
    expect(closed.reason).toBe("dependency removed: rm-c no longer runs after rm-a");
    const skippedRuns = (await outcomes("rm-c")).filter((row) => row.slot === open.slot.toISOString());
    expect(skippedRuns).toEqual([expect.objectContaining({ outcome: "skipped" })]);
    const audit = await h.scheduler.auditTrail({ task: "rm-c" });
    expect(audit.some((entry) => entry.field === "after" && entry.newValue === "(none)")).toBe(true);
    const job = (await h.scheduler.jobs()).find((row) => row.name === "rm-c");
    expect(job).toMatchObject({ cron: NEVER_SOON, after: null });
    release();
  });

  it("run now of an upstream: downstreams follow only with withDownstream", async () => {
    const h = await suite.start(
      [
        { name: "man-a", handler: async () => {} },
        { name: "man-c", handler: async () => {} },
      ],
      [
        { name: "man-a", cron: NEVER_SOON },
        { name: "man-c", after: ["man-a"] },
      ],
    );
    expect(await h.scheduler.runNow("man-a")).toMatchObject({ status: "queued" });
    const [alone] = await pollUntil("man-a's manual run", async () => {
      const rows = await outcomes("man-a");
      return rows.length > 0 ? rows : undefined;
    });
    // its outcome row is written before its end is saved: wait for the row to be unlocked
    await pollUntil("man-a unlocked", async () => {
      const { rows } = await db().pool.query("SELECT locked_at FROM agenda_jobs WHERE name = 'man-a'");
      return rows[0]?.locked_at === null || undefined;
    });
    expect(await h.scheduler.runNow("man-a", { withDownstream: true })).toMatchObject({ status: "queued" });
    const followed = await pollUntil("man-c's run", async () => {
      const rows = await outcomes("man-c");
      return rows.length > 0 ? rows : undefined;
    });
    const [withDownstream] = (await outcomes("man-a")).slice(1);
    expect(followed).toEqual([
      expect.objectContaining({
        slot: withDownstream?.slot,
        outcome: "succeeded",
        upstreams: [{ name: "man-a", runKey: `man-a@${withDownstream?.slot}`, outcome: "succeeded" }],
      }),
    ]);
    expect(await waitRow("man-c", alone?.slot as string)).toBeUndefined();
  });

  it("the API: upstreams and downstreams per task, the chain per slot, run now with downstream, metrics", async () => {
    let failing = true;
    const h = suite.track(
      SchedulerHarness.create(db().pool, [
        {
          name: "api-a",
          handler: async () => {
            if (failing) throw new Error("no data yet");
          },
        },
        { name: "api-b", handler: async () => {} },
        { name: "api-c", handler: async () => {} },
      ]),
    );
    const metrics = createMetrics(h.scheduler);
    const token = "operator-secret-for-dependency-tests";
    const auth = { authorization: `Bearer ${token}` };
    const admin = createAdminServer({
      scheduler: h.scheduler,
      metrics,
      port: 0,
      logger: h.logs.logger,
      tokens: [{ name: "ops", role: "operator", secret: token }],
    });
    await h.writeRaw(
      yamlOf([
        { name: "api-a", cron: EVERY_2S },
        { name: "api-b", after: ["api-a"], waitAtMost: "1h" },
        { name: "api-c", after: ["api-b"], when: "allDone" },
      ]),
    );
    await h.scheduler.start();
    const { url } = await admin.listen();
    try {
      const get = async (path: string) => {
        const response = await fetch(`${url}${path}`, { headers: auth });
        return { status: response.status, body: (await response.json()) as Record<string, unknown> };
      };
      const b = await get("/tasks/api-b");
      expect(b.body.dependencies).toEqual({
        upstreams: ["api-a"],
        downstreams: ["api-c"],
        when: "allSucceeded",
        waitAtMost: "1h",
      });
      expect((b.body.nextRuns as string[]).length).toBeGreaterThan(0); // the slots it runs for: its upstream's
      expect((await get("/tasks/api-a")).body.dependencies).toMatchObject({
        upstreams: [],
        downstreams: ["api-b"],
      });

      // a slot where A failed: B skipped, C (allDone) ran after B's skip
      const chain = await pollUntil("a decided chain slot", async () => {
        const { body } = await get("/chains?task=api-a&limit=20");
        const slots = body.slots as { taskName: string; scheduledAt: string; state: string }[];
        const ran = slots.find((slot) => slot.taskName === "api-c" && slot.state === "ran");
        return ran ? body : undefined;
      });
      expect((chain.tasks as { name: string }[]).map((task) => task.name)).toEqual([
        "api-a",
        "api-b",
        "api-c",
      ]);
      const slots = chain.slots as {
        taskName: string;
        scheduledAt: string;
        state: string;
        reason: string | null;
        upstreams: { name: string; runKey: string; outcome: string | null }[];
      }[];
      const ranC = slots.find((slot) => slot.taskName === "api-c" && slot.state === "ran");
      const skippedB = slots.find(
        (slot) => slot.taskName === "api-b" && slot.scheduledAt === ranC?.scheduledAt,
      );
      expect(skippedB).toMatchObject({ state: "skipped", reason: "upstream api-a failed" });
      expect(skippedB?.upstreams).toEqual([
        { name: "api-a", runKey: `api-a@${ranC?.scheduledAt}`, outcome: "failed", disabled: false },
      ]);
      expect(ranC?.upstreams).toEqual([
        { name: "api-b", runKey: `api-b@${ranC?.scheduledAt}`, outcome: "skipped", disabled: false },
      ]);

      // counted by the instance that claimed each decision: the other schedulers of this file share the
      // database and may claim one now and then; this one claims the next slots
      await pollUntil("the dependency counters of this instance", async () => {
        const samples = parsePrometheus(await (await fetch(`${url}/metrics`, { headers: auth })).text());
        return (
          (sample(samples, "cronwarden_dependency_skips_total", {
            task: "api-b",
            reason: "upstream_failed",
          }) ?? 0) > 0 &&
          (sample(samples, "cronwarden_dependency_waits_total", { task: "api-b" }) ?? 0) > 0 &&
          (sample(samples, "cronwarden_dependency_runs_queued_total", { task: "api-c" }) ?? 0) > 0
        );
      });

      expect((await fetch(`${url}/chains?limit=0`, { headers: auth })).status).toBe(400);
      expect((await fetch(`${url}/chains?task=nope`, { headers: auth })).status).toBe(404);
      expect(
        (await fetch(`${url}/tasks/api-a/run?withDownstream=maybe`, { method: "POST", headers: auth }))
          .status,
      ).toBe(400);
      failing = false;
      await h.writeConfig([
        { name: "api-a", cron: NEVER_SOON },
        { name: "api-b", after: ["api-a"], waitAtMost: "1h" },
        { name: "api-c", after: ["api-b"], when: "allDone" },
      ]);
      await pollUntil("api-a unlocked", async () => {
        const { rows } = await db().pool.query("SELECT locked_at FROM agenda_jobs WHERE name = 'api-a'");
        return rows[0]?.locked_at === null || undefined;
      });
      // through the CLI, which prints what the API answered (withDownstream: true)
      const out: string[] = [];
      const code = await runCli(["run", "api-a", "--with-downstream", "--url", url, "--token", token], {
        out: (line) => out.push(line),
        err: (line) => out.push(line),
        env: {},
        cwd: process.cwd(),
      });
      expect({ code, out }).toEqual({
        code: 0,
        out: [
          expect.stringMatching(
            /^queued a run of api-a \(requested \S+Z by ops, with its downstream tasks\)$/,
          ),
        ],
      });
      const manual = await pollUntil("the manual chain down to api-c", async () => {
        const { body } = await get("/chains?task=api-c&limit=50");
        const rows = body.slots as {
          taskName: string;
          state: string;
          manual: boolean;
          scheduledAt: string;
        }[];
        const c = rows.find((slot) => slot.taskName === "api-c" && slot.manual && slot.state === "ran");
        return c ? rows.filter((slot) => slot.scheduledAt === c.scheduledAt) : undefined;
      });
      expect(manual.map((slot) => [slot.taskName, slot.state]).sort()).toEqual([
        ["api-b", "ran"],
        ["api-c", "ran"],
      ]);
    } finally {
      await admin.close();
    }
  }, 120_000);

  it("the run-log retention prunes decided waits with their slots' records (last: it empties the log)", async () => {
    const h = await suite.start(
      [{ name: "prune-a", handler: async () => {} }],
      [{ name: "prune-a", cron: NEVER_SOON }],
    );
    const count = async (where: string) =>
      (await db().pool.query(`SELECT count(*)::int AS n FROM cronwarden_dependency_waits WHERE ${where}`))
        .rows[0].n;
    expect(await count("state IN ('ran', 'skipped')")).toBeGreaterThan(0);
    const { rows } = await db().pool.query<{ now: Date }>("SELECT now()");
    const before = (rows[0] as { now: Date }).now;
    // a prune as of 31 days from now (retention 30 days) removes every wait decided until now
    await pollUntil(
      "a prune by this instance",
      async () =>
        (await h.scheduler.pruneRunHistory(new Date(Date.now() + 31 * 86_400_000))) !== null || undefined,
    );
    const left = await db().pool.query(
      // skipped is final when decided; man-c ran once, long before (its upstream has no slot of its own)
      `SELECT count(*)::int AS n FROM cronwarden_dependency_waits
        WHERE (state = 'skipped' AND decided_at < $1) OR (task = 'man-c' AND state = 'ran')`,
      [before],
    );
    expect(left.rows[0].n).toBe(0);
  });
});

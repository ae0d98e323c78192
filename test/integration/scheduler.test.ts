import { describe, expect, it } from "vitest";
import { harnessSuite, pollUntil } from "../helpers/harness.js";
import { skipAPreLockedSlot } from "../helpers/preLock.js";

/**
 * The whole loop in one process against a real PostgreSQL: a watched config file, the reconciler,
 * Agenda's workers. Every test uses its own task names, so they share one database.
 */

const suite = harnessSuite();
const harness = suite.start;
const db = () => suite.db();

async function jobRow(name: string) {
  const result = await db().pool.query("SELECT * FROM agenda_jobs WHERE name = $1", [name]);
  return result.rows[0];
}

describe("scheduler with a watched config file", () => {
  it("records every run in Agenda's log: slot, start, end, duration, outcome, error", async () => {
    const h = await harness(
      [
        { name: "rec-ok", handler: async () => {} },
        {
          name: "rec-fail",
          handler: async () => {
            throw new Error("upstream returned 503");
          },
        },
      ],
      [{ name: "rec-ok" }, { name: "rec-fail" }],
    );
    await Promise.all([h.runsOf("rec-ok", 2), h.runsOf("rec-fail", 2)]);
    await pollUntil(
      "both run records",
      async () => (await h.scheduler.runs("rec-fail")).length >= 2 || undefined,
    );
    const [ok] = await h.scheduler.runs("rec-ok", 1);
    const [failed] = await h.scheduler.runs("rec-fail", 1);
    expect(ok).toMatchObject({
      taskName: "rec-ok",
      outcome: "succeeded",
      error: null,
      instanceId: h.scheduler.instanceId,
      attempt: 1,
    });
    expect(failed).toMatchObject({ taskName: "rec-fail", outcome: "failed", error: "upstream returned 503" });
    for (const run of [ok, failed]) {
      if (!run?.startedAt) throw new Error("run record without start");
      expect(run.scheduledAt.getUTCMilliseconds()).toBe(0); // a cron slot, not a clock reading
      expect(run.startedAt.getTime()).toBeGreaterThanOrEqual(run.scheduledAt.getTime());
      expect(run.finishedAt.getTime()).toBeGreaterThanOrEqual(run.startedAt.getTime());
      expect(run.durationMs).toEqual(expect.any(Number));
    }
  });

  it("a task's error cut inside an emoji (a lone surrogate) is recorded, and its slots end as any failed slot's", async () => {
    // the run-log rows and the saves of a batch go to the server as one JSON text, whose input
    // refuses the escape of a lone surrogate: the whole statement failed, and with it the run's end
    const h = await harness(
      [
        {
          name: "cut-emoji",
          handler: async () => {
            throw new Error("quota 😀 exceeded: \ud83d");
          },
        },
      ],
      [{ name: "cut-emoji" }],
    );
    await pollUntil(
      "two run records",
      async () => (await h.scheduler.runs("cut-emoji")).length >= 2 || undefined,
    );
    const runs = await h.scheduler.runs("cut-emoji", 2);
    for (const run of runs)
      expect(run).toMatchObject({ outcome: "failed", error: "quota 😀 exceeded: \uFFFD", attempt: 1 });
    // the first slot's end was saved: its row was unlocked and carries the failure
    expect((await jobRow("cut-emoji"))?.fail_reason).toBe("quota 😀 exceeded: \uFFFD");
    // each scheduler keeps one client of the file's pool (10) for its LISTEN: the tests after
    // this one need the room (a reconcile holds one for its lock while its work takes others)
    await h.stop();
  });

  it("a cron change keeps the same job row and stores the new next run", async () => {
    const h = await harness(
      [{ name: "re-time", handler: async () => {} }],
      [{ name: "re-time", cron: "* * * * * *" }],
    );
    const before = await jobRow("re-time");
    await h.writeConfig([{ name: "re-time", cron: "0 0 * * * *" }]);
    const after = await jobRow("re-time");
    expect(after.id).toBe(before.id);
    expect(after.repeat_interval).toBe("0 0 * * * *");
    const next: Date = after.next_run_at;
    expect(next.getUTCMinutes()).toBe(0);
    expect(next.getUTCSeconds()).toBe(0);
    expect(next.getTime()).toBeGreaterThan(Date.now());
  });

  it("after a disable, the task runs no more while the others go on", async () => {
    let stoppedRuns = 0;
    const h = await harness(
      [
        { name: "dis-target", handler: async () => void stoppedRuns++ },
        { name: "dis-witness", handler: async () => {} },
      ],
      [{ name: "dis-target" }, { name: "dis-witness" }],
    );
    await h.runsOf("dis-target", 1);
    await h.writeConfig([{ name: "dis-target", enabled: false }, { name: "dis-witness" }]);
    await pollUntil("the disable stored", async () => (await jobRow("dis-target")).disabled === true);
    // a slot whose run was prepared before the row changed still runs: up to the start-ahead
    // (1.5 s at the harness's 15 s lock) before its slot (docs/design.md, "The start-ahead");
    // three witness slots later those are over: count from there
    await h.runsOf("dis-witness", 3);
    const countAfterDisable = stoppedRuns;
    await h.runsOf("dis-witness", 3);
    expect(stoppedRuns).toBe(countAfterDisable);
    expect((await jobRow("dis-target")).disabled).toBe(true);
  });

  it("an invalid cron is rejected with its reason and the old schedule keeps running", async () => {
    const h = await harness(
      [{ name: "bad-cron", handler: async () => {} }],
      [{ name: "bad-cron", cron: "*/2 * * * * *" }],
    );
    await h.writeConfig([{ name: "bad-cron", cron: "*/61 * * * *" }]);
    const error = await h.logs.waitFor(
      "the rejection",
      (line) => line.action === "reject" && line.task === "bad-cron",
    );
    expect(error.msg).toBe(
      'config tasks[0] "bad-cron": cron "*/61 * * * *" is invalid: minute field "*/61": step 61 is outside 1-59; the task keeps its schedule "*/2 * * * * *" (UTC, enabled)',
    );
    await h.runsOf("bad-cron", 2);
    expect((await jobRow("bad-cron")).repeat_interval).toBe("*/2 * * * * *");
  });

  it("an unknown name is rejected and the other entries of the snapshot are applied", async () => {
    const h = await harness(
      [
        { name: "known-a", handler: async () => {} },
        { name: "known-b", handler: async () => {} },
      ],
      [{ name: "known-a" }],
    );
    const result = await h.writeConfig([
      { name: "known-a" },
      { name: "unknwon" },
      { name: "known-b", cron: "0 0 * * * *" },
    ]);
    expect(result.plan.actions).toContainEqual(expect.objectContaining({ kind: "reject", task: "unknwon" }));
    expect((await jobRow("known-b")).repeat_interval).toBe("0 0 * * * *");
    expect(await jobRow("unknwon")).toBeUndefined();
  });

  it("a malformed file is ignored: the last valid snapshot stays in force until the file is fixed", async () => {
    const h = await harness(
      [{ name: "malformed", handler: async () => {} }],
      [{ name: "malformed", cron: "*/2 * * * * *" }],
    );
    const revision = h.scheduler.desiredState()?.revision;
    await h.writeRaw("tasks:\n  - name: malformed\n    cron: [unclosed\n");
    const error = await h.logs.waitFor("the parse error", (line) =>
      /cannot be parsed/.test(String(line.msg)),
    );
    expect(error.msg).toMatch(/not valid YAML.*keeping revision/s);
    expect(h.scheduler.desiredState()?.revision).toBe(revision);
    await h.runsOf("malformed", 2);
    await h.writeConfig([{ name: "malformed", cron: "0 0 * * * *" }]);
    expect((await jobRow("malformed")).repeat_interval).toBe("0 0 * * * *");
  });

  it("a task disabled after Agenda pre-locked its slot does not run its handler; its next slot is an ordinary run", async () => {
    const slotsRun: string[] = [];
    const reruns: string[] = [];
    const h = await harness(
      [
        {
          name: "prelocked",
          handler: async (context) => {
            slotsRun.push(context.scheduledAt.toISOString());
            if (context.rerunOf) reruns.push(context.scheduledAt.toISOString());
          },
        },
      ],
      [{ name: "prelocked", cron: "*/5 * * * * *" }],
    );
    const skipped = await skipAPreLockedSlot(db().pool, h.scheduler, "prelocked");
    expect(skipped).toMatchObject({
      outcome: "skipped",
      detail: "the task was disabled after this slot was locked",
    });
    expect(slotsRun).not.toContain(skipped.scheduledAt.toISOString());
    // the skip, decided before its slot (the start-ahead), ends no earlier than its recorded start:
    // the row does not look like a run that never finished
    const row = await jobRow("prelocked");
    expect(row.last_finished_at.getTime()).toBeGreaterThanOrEqual(row.last_run_at.getTime());
    const before = slotsRun.length;
    await db().pool.query("UPDATE agenda_jobs SET disabled = false WHERE name = 'prelocked'");
    await pollUntil("the next slot's run", () => slotsRun.length > before, { timeoutMs: 15_000 });
    expect(reruns).toEqual([]);
  });

  it("a cron change during a long run: no second concurrent run, and the new cron decides the next slot", async () => {
    let active = 0;
    let maxActive = 0;
    let release: () => void = () => {};
    const released = new Promise<void>((resolve) => {
      release = resolve;
    });
    const h = await harness(
      [
        {
          name: "long-run",
          handler: async () => {
            active++;
            maxActive = Math.max(maxActive, active);
            await released;
            active--;
          },
        },
      ],
      [{ name: "long-run", cron: "* * * * * *" }],
    );
    await new Promise<void>((resolve) => h.scheduler.once("run:started", () => resolve()));
    await h.writeConfig([{ name: "long-run", cron: "0 0 0 1 1 *" }]);
    const planned: Date = (await jobRow("long-run")).next_run_at;
    expect([
      planned.getUTCMonth(),
      planned.getUTCDate(),
      planned.getUTCHours(),
      planned.getUTCMinutes(),
    ]).toEqual([0, 1, 0, 0]);
    // give two slots of the old 1 s cron the chance to (wrongly) start a second run
    await new Promise((resolve) => setTimeout(resolve, 2500));
    const finished = h.runsOf("long-run", 1);
    release();
    await finished;
    const after = await pollUntil("the run's final save", async () => {
      const row = await jobRow("long-run");
      return row.locked_at === null ? row : undefined;
    });
    expect(after.next_run_at.getTime()).toBe(planned.getTime());
    expect(maxActive).toBe(1);
  });
});

import { describe, expect, it } from "vitest";
import { harnessSuite, pollUntil, SchedulerHarness } from "../helpers/harness.js";

/** Durable last-known desired state, anti-entropy (drift repair) and the audit trail. */

const suite = harnessSuite();
const start = suite.start;
const db = () => suite.db();
const task = (name: string) => ({ name, handler: async () => {} });

async function jobRow(name: string) {
  const { rows } = await db().pool.query("SELECT * FROM agenda_jobs WHERE name = $1", [name]);
  return rows[0];
}

describe("durable desired state", () => {
  it("an instance that starts while its config source is unreadable schedules from the last applied config, and says so", async () => {
    const tasks = [task("dur-a"), task("dur-b")];
    const first = await start(
      tasks,
      [
        { name: "dur-a", cron: "0 0 * * * *" },
        { name: "dur-b", enabled: false },
      ],
      {
        namespace: "durable",
      },
    );
    await first.stop();
    await db().pool.query("DELETE FROM agenda_jobs WHERE name LIKE 'dur-%'"); // so the restart has work to do

    const restarted = SchedulerHarness.create(db().pool, tasks, { namespace: "durable" }); // no config file at all
    suite.track(restarted);
    await restarted.scheduler.start();
    const line = restarted.logs.find((entry) =>
      /^config source unreachable at start-up/.test(String(entry.msg)),
    );
    expect(line?.msg).toMatch(
      /scheduling from the last applied config, revision [0-9a-f]{16} of file .*tasks\.yaml, applied .* by /,
    );
    expect(await jobRow("dur-a")).toMatchObject({ repeat_interval: "0 0 * * * *", disabled: false });
    expect(await jobRow("dur-b")).toMatchObject({ disabled: true });
    expect(restarted.scheduler.desiredState()?.source).toMatch(/^last applied config \(file /);
  });
});

describe("anti-entropy", () => {
  it("repairs drift made by hand (row deleted, cron edited, next run lost, flag flipped) and records it as drift", async () => {
    const h = await start(
      [task("drift-deleted"), task("drift-cron"), task("drift-next"), task("drift-flag")],
      [
        { name: "drift-deleted", cron: "0 0 * * * *" },
        { name: "drift-cron", cron: "0 0 * * * *" },
        { name: "drift-next", cron: "0 0 * * * *" },
        { name: "drift-flag", cron: "0 0 * * * *" },
      ],
      { antiEntropyMs: 300, namespace: "drift" },
    );
    await db().pool.query("DELETE FROM agenda_jobs WHERE name = 'drift-deleted'");
    await db().pool.query("UPDATE agenda_jobs SET repeat_interval = '*/7 * * * *' WHERE name = 'drift-cron'");
    await db().pool.query("UPDATE agenda_jobs SET next_run_at = NULL WHERE name = 'drift-next'");
    await db().pool.query("UPDATE agenda_jobs SET disabled = true WHERE name = 'drift-flag'");
    await pollUntil("the repairs", async () => {
      const [deleted, cron, next, flag] = await Promise.all(
        ["drift-deleted", "drift-cron", "drift-next", "drift-flag"].map(jobRow),
      );
      return (
        deleted && cron?.repeat_interval === "0 0 * * * *" && next?.next_run_at && flag?.disabled === false
      );
    });
    const expected = [
      "drift-deleted job null -> created",
      "drift-cron cron */7 * * * * -> 0 0 * * * *",
      "drift-next nextRunAt null -> next slot from now",
      "drift-flag enabled false -> true",
    ];
    // the audit rows are written after the repairs they record: wait for them
    const repaired = await pollUntil("the drift audit rows", async () => {
      const drift = (await h.scheduler.auditTrail({ limit: 50 }))
        .filter((entry) => entry.kind === "drift")
        .map((entry) => `${entry.task} ${entry.field} ${entry.oldValue} -> ${entry.newValue}`);
      return expected.every((line) => drift.includes(line)) && drift;
    });
    expect(repaired).toEqual(expect.arrayContaining(expected));
    const logged = h.logs.lines.filter((line) => /^drift repaired: /.test(String(line.msg)));
    expect(logged.length).toBeGreaterThanOrEqual(4);
    expect(logged.find((line) => line.task === "drift-flag")).toMatchObject({
      before: { enabled: false },
      after: { enabled: true },
    });
  });
});

describe("audit trail", () => {
  it("records every applied change: task, field, old -> new, source, revision, instance", async () => {
    const h = await start([task("aud-x")], [{ name: "aud-x", cron: "0 0 * * * *" }], { namespace: "audit" });
    const result = await h.writeConfig([
      { name: "aud-x", cron: "0 30 * * * *", timezone: "Asia/Tokyo", enabled: false },
    ]);
    const trail = await h.scheduler.auditTrail({ task: "aud-x" });
    expect(
      trail.slice(0, 3).map((entry) => [entry.kind, entry.field, entry.oldValue, entry.newValue]),
    ).toEqual(
      expect.arrayContaining([
        ["change", "cron", "0 0 * * * *", "0 30 * * * *"],
        ["change", "timezone", "UTC", "Asia/Tokyo"],
        ["change", "enabled", "true", "false"],
      ]),
    );
    expect(trail[0]).toMatchObject({
      source: `file ${h.configPath}`,
      revision: result.revision,
      instance: h.scheduler.instanceId,
    });
    expect(trail.at(-1)).toMatchObject({ field: "job", newValue: "created" });
  });

  it("an empty task list is refused: no task is disabled and the error says how to mean it", async () => {
    const h = await start([task("empty-a")], [{ name: "empty-a", cron: "0 0 * * * *" }], {
      namespace: "empty",
    });
    await h.writeRaw("tasks: []\n");
    const error = await h.logs.waitFor("the refusal", (line) => /empty "tasks" list/.test(String(line.msg)));
    expect(error.msg).toMatch(/add "confirmDisableAll": true to the document; keeping revision/);
    expect((await jobRow("empty-a")).disabled).toBe(false);
  });
});

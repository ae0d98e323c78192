import { writeFile } from "node:fs/promises";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { describe, expect, it } from "vitest";
import { REPEATED_SIGNAL_MS } from "../../src/scheduler/shutdown.js";
import { yamlOf } from "../helpers/harness.js";
import { ServiceProcess } from "../helpers/processes.js";
import { processSuite } from "../helpers/processSuite.js";

/** The service as real OS processes against one PostgreSQL. */

const suite = processSuite("processes");

async function instance(name: string, config: Parameters<typeof yamlOf>[0], extra: NodeJS.ProcessEnv = {}) {
  const configFile = path.join(suite.dir, `${name}.yaml`);
  await writeFile(configFile, yamlOf(config));
  const child = new ServiceProcess("test/fixtures/instance.ts", {
    DATABASE_URL: suite.db.url,
    CRONWARDEN_CONFIG_FILE: configFile,
    CRONWARDEN_INSTANCE_ID: name,
    CRONWARDEN_MIN_INTERVAL_MS: "1000",
    CRONWARDEN_PROCESS_EVERY_MS: "500",
    ...extra,
  });
  suite.processes.push(child);
  return child;
}

const started = (line: { msg?: unknown }) => /^scheduler started/.test(String(line.msg));

describe("service processes", () => {
  it("three instances started at the same moment on an empty database all start, with one job per task", async () => {
    const config = [{ name: "quick" }, { name: "slow", enabled: false }];
    const peers = await Promise.all(["a", "b", "c"].map((name) => instance(name, config)));
    await Promise.all(peers.map((peer) => peer.waitFor(`${peer.child.pid} to start`, started)));
    const rows = await suite.db.pool.query(
      "SELECT name, count(*)::int AS n FROM agenda_jobs GROUP BY name ORDER BY name",
    );
    expect(rows.rows).toEqual([
      { name: "quick", n: 1 },
      { name: "slow", n: 1 },
    ]);
  });

  it("SIGTERM with a run in progress: no new runs, the run completes and is recorded, then the process exits 0", async () => {
    const service = await instance("drain", [{ name: "slow", cron: "* * * * * *" }], {
      SLOW_TASK_MS: "3000",
    });
    const runStart = await service.waitFor(
      "a slow run",
      (line) => line.task === "slow" && line.msg === "run started",
    );
    service.child.kill("SIGTERM");
    expect(await service.exited).toEqual({ code: 0, signal: null });

    const messages = service.messages();
    const signalAt = messages.indexOf("SIGTERM received: shutting down (send it again to exit at once)");
    const finishedAt = messages.findIndex((msg) => /^run succeeded in \d+ ms$/.test(msg));
    expect(signalAt).toBeGreaterThanOrEqual(0);
    expect(finishedAt).toBeGreaterThan(signalAt);
    expect(messages.at(-1)).toBe("stopped: every run finished");
    expect(messages.slice(signalAt).filter((msg) => msg === "run started")).toEqual([]);

    const recorded = await suite.db.pool.query(
      "SELECT event, meta->>'outcome' AS outcome FROM agenda_logs WHERE job_name = 'slow' AND meta->>'scheduledAt' = $1 AND event IN ('success', 'fail')",
      [runStart.slot],
    );
    expect(recorded.rows).toEqual([{ event: "success", outcome: "succeeded" }]);
    const job = await suite.db.pool.query("SELECT locked_at FROM agenda_jobs WHERE name = 'slow'");
    expect(job.rows).toEqual([{ locked_at: null }]);
  });

  it("a second signal exits at once without waiting for the run; a repeat within a second is the same request", async () => {
    const service = await instance("impatient", [{ name: "slow", cron: "* * * * * *" }], {
      SLOW_TASK_MS: "60000",
    });
    await service.waitFor("a slow run", (line) => line.task === "slow" && line.msg === "run started");
    service.child.kill("SIGTERM");
    await service.waitFor("the first signal", (line) => /^SIGTERM received/.test(String(line.msg)));
    // what a terminal's Ctrl-C under `npm start` delivers: the signal twice, a moment apart
    service.child.kill("SIGTERM");
    await service.waitFor("the repeat taken as the same request", (line) =>
      String(line.msg).includes("taken as the same request"),
    );
    // the window is counted from the first signal, which the child logged before we read it
    await sleep(REPEATED_SIGNAL_MS);
    service.child.kill("SIGTERM");
    expect(await service.exited).toEqual({ code: 130, signal: null });
    expect(service.find((line) => /^run succeeded/.test(String(line.msg)))).toBeUndefined();
  });
});

import { readFileSync } from "node:fs";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { afterAll, beforeAll, expect, it } from "vitest";
import { REPEATED_SIGNAL_MS } from "../../src/scheduler/shutdown.js";
import { yamlOf } from "../helpers/harness.js";
import { pollUntil } from "../helpers/poll.js";
import { ServiceProcess } from "../helpers/processes.js";

/** `npm start` as a user runs it: the reference service on its own embedded PostgreSQL. */

let dataDir: string;

beforeAll(async () => {
  dataDir = await mkdtemp(path.join(tmpdir(), "cronwarden-service-"));
});

afterAll(async () => {
  await rm(dataDir, { recursive: true, force: true });
});

it("the reference service starts on an embedded PostgreSQL, logs a heartbeat run within a minute and stops cleanly", async () => {
  const service = new ServiceProcess("service/main.ts", { CRONWARDEN_DATA_DIR: dataDir, LOG_LEVEL: "info" });
  try {
    const started = await service.waitFor(
      "the scheduler to start",
      (line) => /^scheduler started/.test(String(line.msg)),
      60_000,
    );
    expect(started.tasks).toEqual(["heartbeat", "reportRollup"]);
    const run = await service.waitFor(
      "a heartbeat run",
      (line) => line.task === "heartbeat" && /^run succeeded/.test(String(line.msg)),
      65_000,
    );
    expect(run.outcome).toBe("succeeded");
    // the admin API and the dashboard come with it (on loopback)
    const admin = service.find((line) => /^admin API listening on/.test(String(line.msg)));
    // the log line and the run record are written independently: wait for the record
    const lastOutcome = await pollUntil("the heartbeat's run record", async () => {
      const tasks = (await (await fetch(`${admin?.url}/tasks`)).json()) as Array<{
        name: string;
        lastOutcome: string | null;
      }>;
      return tasks.find((task) => task.name === "heartbeat")?.lastOutcome ?? undefined;
    });
    expect(lastOutcome).toBe("succeeded");
    expect((await fetch(`${admin?.url}/dashboard/`)).status).toBe(200);
    service.child.kill("SIGTERM");
    expect(await service.exited).toEqual({ code: 0, signal: null });
    // shutdown order: scheduler drained (reportRollup may have been running), then PostgreSQL stopped
    const messages = service.messages();
    const drained = messages.findIndex((msg) => /^stopped/.test(msg));
    expect(drained).toBeGreaterThan(messages.indexOf("stopping: no new runs; waiting for running ones"));
    expect(messages.at(-1)).toBe("embedded PostgreSQL stopped");
  } finally {
    await service.kill();
  }
}, 150_000);

it("exiting at once on a second signal does not leave the embedded PostgreSQL running", async () => {
  const ownDir = path.join(dataDir, "impatient");
  const configFile = path.join(dataDir, "impatient.yaml");
  await writeFile(configFile, yamlOf([{ name: "slow", cron: "* * * * * *" }]));
  const service = new ServiceProcess("test/fixtures/instance.ts", {
    CRONWARDEN_DATA_DIR: ownDir,
    CRONWARDEN_CONFIG_FILE: configFile,
    CRONWARDEN_MIN_INTERVAL_MS: "1000",
    SLOW_TASK_MS: "60000",
  });
  let postmaster: number | undefined;
  try {
    await service.waitFor("a slow run", (line) => line.task === "slow" && line.msg === "run started", 60_000);
    postmaster = Number.parseInt(
      readFileSync(path.join(ownDir, "postgres", "postmaster.pid"), "utf8").split("\n")[0] ?? "",
      10,
    );
    service.child.kill("SIGTERM");
    await service.waitFor("the first signal", (line) => /^SIGTERM received/.test(String(line.msg)));
    await sleep(REPEATED_SIGNAL_MS);
    service.child.kill("SIGTERM");
    expect(await service.exited).toEqual({ code: 130, signal: null });
    // the service is gone; the server it started was asked to stop and does so on its own
    const pid = postmaster;
    await pollUntil("the embedded PostgreSQL to stop", () => !isRunning(pid), { timeoutMs: 30_000 });
  } finally {
    await service.kill();
    if (postmaster !== undefined && isRunning(postmaster)) process.kill(postmaster, "SIGINT"); // not left to other tests
  }
}, 120_000);

function isRunning(pid: number): boolean {
  try {
    process.kill(pid, 0);
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return !["Z", "X"].includes(stat.charAt(stat.lastIndexOf(")") + 2)); // an unreaped zombie has stopped
  } catch {
    return false;
  }
}

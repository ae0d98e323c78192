import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import type { Browser } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { AdminServer } from "../../src/admin/index.js";
import type { TaskContext } from "../../src/index.js";
import { ARTIFACTS, chromiumAvailable, dashboardServer, launchChromium } from "../helpers/chromium.js";
import { createTestDatabase, type TestDatabase } from "../helpers/database.js";
import { pollUntil, SchedulerHarness } from "../helpers/harness.js";

/** Re-run a slot and backfill a range in the dashboard (docs/operations.md), headless Chromium. */

const available = chromiumAvailable;
const TOKEN = "dashboard-slots-token-0123456789";

let db: TestDatabase;
let harness: SchedulerHarness;
let server: AdminServer;
let url: string;
let browser: Browser;
const seen: Pick<TaskContext, "taskName" | "scheduledAt" | "runKey" | "trigger">[] = [];

beforeAll(async () => {
  if (!available) return;
  db = await createTestDatabase();
  const remember = (context: TaskContext) =>
    seen.push({
      taskName: context.taskName,
      scheduledAt: context.scheduledAt,
      runKey: context.runKey,
      trigger: context.trigger,
    });
  harness = await SchedulerHarness.start(
    db.pool,
    [
      {
        name: "dash-repair",
        handler: async (context) => {
          remember(context);
          if (context.trigger !== "rerun") throw new Error("the first run of this slot is broken");
        },
      },
      {
        name: "dash-hourly",
        handler: async (context) => {
          remember(context);
          await sleep(150, undefined, { signal: context.signal });
        },
      },
    ],
    [
      { name: "dash-repair", cron: "0 0 0 1 1 *" },
      { name: "dash-hourly", cron: "0 * * * *" },
    ],
  );
  ({ server, url } = await dashboardServer(harness, TOKEN));
  browser = await launchChromium();
}, 120_000);

afterAll(async () => {
  await browser?.close();
  await server?.close();
  await harness?.stop();
  await db?.drop();
});

/** datetime-local text of a UTC time in the browser's zone (the container's: UTC unless TZ says otherwise). */
function localText(time: number, offsetMinutes: number): string {
  return new Date(time - offsetMinutes * 60_000).toISOString().slice(0, 16);
}

describe.skipIf(!available)("dashboard: re-run a slot, backfill a range", () => {
  it("the run page re-runs a failed slot under its own identity; it needs an operator token", async () => {
    expect((await harness.scheduler.runNow("dash-repair", { requestedBy: "test" })).status).toBe("queued");
    const failed = await pollUntil("the failed manual run", async () =>
      (await harness.scheduler.runHistory({ task: "dash-repair", limit: 5 })).runs.find(
        (run) => run.outcome === "failed",
      ),
    );
    await pollUntil(
      "the run's end saved",
      async () => !(await harness.scheduler.taskStatus("dash-repair"))?.running,
    );
    const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
    const tab = await context.newPage();
    tab.setDefaultTimeout(15_000);
    await tab.goto(`${url}/dashboard/#/runs/${failed.id}`);
    await tab.locator("#rerun-form").waitFor();
    await tab.fill("#rerun-reason", "the fix is deployed");
    await tab.locator("#rerun").click();
    await pollUntil("the refusal", async () =>
      /refused: missing bearer token/.test(await tab.locator("#rerun-result").innerText()),
    );
    await tab.fill("#token", TOKEN);
    await tab.click("#token-form button");
    await tab.locator("#rerun-form").waitFor();
    await tab.fill("#rerun-reason", "the fix is deployed");
    await tab.locator("#rerun:not([disabled])").click();
    const slot = failed.scheduledAt.toISOString();
    await pollUntil("re-run queued", async () =>
      (await tab.locator("#rerun-result").innerText()).includes(`re-run queued: dash-repair@${slot}`),
    );
    const rerun = await pollUntil(
      "the re-run's record",
      async () =>
        (await harness.scheduler.runHistory({ task: "dash-repair", limit: 5, trigger: "rerun" })).runs[0],
    );
    expect(rerun).toMatchObject({ outcome: "succeeded", requestedBy: "admin" });
    expect(rerun.scheduledAt.toISOString()).toBe(slot);
    expect(seen.filter((run) => run.trigger === "rerun")).toEqual([
      {
        taskName: "dash-repair",
        scheduledAt: failed.scheduledAt,
        runKey: `dash-repair@${slot}`,
        trigger: "rerun",
      },
    ]);
    await tab.goto(`${url}/dashboard/#/runs/${rerun.id}`);
    await tab.locator("#run-facts").waitFor();
    expect(await tab.locator("#run-facts").innerText()).toMatch(/Trigger\s+rerun by admin/);
    // it succeeded now: the form offers force
    await tab.locator("#rerun-force").waitFor();
    await tab.screenshot({ path: path.join(ARTIFACTS, "dashboard-rerun.png"), fullPage: true });
    await context.close();
  });

  it("the task page lists a backfill's slots (dry run), starts it, shows its progress to the end, and cancels another", async () => {
    const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
    const tab = await context.newPage();
    tab.setDefaultTimeout(30_000);
    await tab.goto(`${url}/dashboard/`);
    await tab.fill("#token", TOKEN);
    await tab.click("#token-form button");
    await tab.goto(`${url}/dashboard/#/tasks/dash-hourly`);
    await tab.locator("#backfill-form").waitFor();
    const offset = await tab.evaluate(() => new Date().getTimezoneOffset());
    const hour = 3_600_000;
    const base = Math.floor(Date.now() / hour) * hour;
    // 24 whole hours of yesterday's range: 24 slots
    await tab.fill("#bf-from", localText(base - 48 * hour, offset));
    await tab.fill("#bf-to", localText(base - 25 * hour, offset));
    await tab.fill("#bf-concurrency", "4");
    await tab.locator("#bf-dry-run").click();
    await pollUntil("the dry run", async () =>
      (await tab.locator("#bf-result").innerText()).includes(
        "24 slot(s) would run, 0 skipped (nothing started)",
      ),
    );
    expect(await tab.locator("#bf-slots tbody tr").count()).toBe(24);
    expect(await harness.scheduler.slotActions.backfills({ task: "dash-hourly", limit: 5 })).toEqual([]);

    await tab.locator("#bf-start").click();
    const row = tab.locator("#backfills tbody tr").first();
    await row.waitFor();
    await pollUntil(
      "the progress to the end",
      async () =>
        (await row.locator(".backfill-progress").innerText()).startsWith("24/24 done: 24 succeeded"),
      { timeoutMs: 30_000 },
    );
    expect(await row.locator(".badge").innerText()).toContain("done");
    const backfilled = seen.filter((run) => run.trigger === "backfill");
    expect(backfilled).toHaveLength(24);
    for (const run of backfilled) expect(run.runKey).toBe(`dash-hourly@${run.scheduledAt.toISOString()}`);

    // a long one, cancelled from the page
    await tab.fill("#bf-from", localText(base - 30 * 24 * hour, offset));
    await tab.fill("#bf-to", localText(base - 49 * hour, offset));
    await tab.fill("#bf-concurrency", "1");
    await tab.locator("#bf-start").click();
    const cancel = tab.locator("#backfills .backfill-cancel");
    await cancel.waitFor();
    await cancel.click();
    await pollUntil("the cancelled backfill", async () =>
      (await tab.locator("#backfills tbody tr").first().locator(".badge").innerText()).includes("cancelled"),
    );
    const [cancelled] = await harness.scheduler.slotActions.backfills({ task: "dash-hourly", limit: 1 });
    expect(cancelled).toMatchObject({ state: "cancelled", cancelledBy: "admin" });
    await tab.screenshot({ path: path.join(ARTIFACTS, "dashboard-backfill.png"), fullPage: true });
    await context.close();
  });
});

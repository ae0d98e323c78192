import path from "node:path";
import type { Browser, Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { AdminServer } from "../../src/admin/index.js";
import { ARTIFACTS, chromiumAvailable, dashboardServer, launchChromium } from "../helpers/chromium.js";
import { createTestDatabase, type TestDatabase } from "../helpers/database.js";
import { pollUntil, SchedulerHarness } from "../helpers/harness.js";

/**
 * The dashboard's dependency views in headless Chromium (as test/e2e/dashboard.test.ts): upstream
 * and downstream on the task page, the per-slot chain view, and run now with the downstreams.
 */

const available = chromiumAvailable;
const TOKEN = "dependency-dashboard-token-0123456789";

let db: TestDatabase;
let harness: SchedulerHarness;
let server: AdminServer;
let url: string;
let browser: Browser;

beforeAll(async () => {
  if (!available) return;
  db = await createTestDatabase();
  harness = await SchedulerHarness.start(
    db.pool,
    [
      { name: "dep-a", handler: async () => {} },
      { name: "dep-c", handler: async () => {} },
      { name: "dep-d", handler: async () => {} },
      {
        name: "dep-x",
        handler: async () => {
          throw new Error("source down");
        },
      },
      { name: "dep-y", handler: async () => {} },
      { name: "dep-m", handler: async () => {} },
      { name: "dep-n", handler: async () => {} },
    ],
    [
      { name: "dep-a", cron: "*/2 * * * * *" },
      { name: "dep-c", after: ["dep-a"], waitAtMost: "1h" },
      { name: "dep-d", after: ["dep-c"] },
      { name: "dep-x", cron: "*/2 * * * * *" },
      { name: "dep-y", after: ["dep-x"] },
      { name: "dep-m", cron: "0 0 0 1 1 *" },
      { name: "dep-n", after: ["dep-m"] },
    ],
  );
  ({ server, url } = await dashboardServer(harness, TOKEN));
  browser = await launchChromium();
  // a whole chain slot, and a skipped one, in the database's record
  await pollUntil("a slot of dep-d and a skip of dep-y", async () => {
    const slots = await harness.scheduler.chains({ limit: 100 });
    return (
      slots.some((slot) => slot.taskName === "dep-d" && slot.state === "ran") &&
      slots.some((slot) => slot.taskName === "dep-y" && slot.state === "skipped")
    );
  });
}, 120_000);

afterAll(async () => {
  await browser?.close();
  await server?.close();
  await harness?.stop();
  await db?.drop();
});

async function page(): Promise<Page> {
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  await context.addInitScript(`sessionStorage.setItem("cronwarden-admin-token", ${JSON.stringify(TOKEN)})`);
  const opened = await context.newPage();
  opened.setDefaultTimeout(15_000);
  return opened;
}

describe.skipIf(!available)("dashboard: task dependencies", () => {
  it("the task page shows its upstream and downstream, and the chain by slot", async () => {
    const tab = await page();
    await tab.goto(`${url}/dashboard/#/tasks/dep-c`);
    await tab.locator("#upstreams").waitFor();
    expect(await tab.locator("#upstreams").innerText()).toBe(
      "runs after dep-a when allSucceeded, waits at most 1h",
    );
    expect(await tab.locator("#downstreams").innerText()).toBe("dep-d runs after this task");
    expect(await tab.locator("#upstreams a").getAttribute("href")).toBe("#/tasks/dep-a");
    expect(await tab.locator("#chain thead").innerText()).toMatch(/Slot\s+dep-a\s+dep-c\s+dep-d/);
    // a slot where the whole chain ran
    const whole = tab
      .locator("#chain tbody tr")
      .filter({ has: tab.locator('td[data-task="dep-d"] .badge.succeeded') })
      .first();
    await whole.waitFor();
    expect(await whole.locator('td[data-task="dep-a"] .badge.succeeded').count()).toBe(1);
    expect(await whole.locator('td[data-task="dep-c"] .badge.succeeded').count()).toBe(1);
    await tab.screenshot({ path: path.join(ARTIFACTS, "dashboard-dependencies.png"), fullPage: true });
  });

  it("a skipped slot shows its reason in the chain view", async () => {
    const tab = await page();
    await tab.goto(`${url}/dashboard/#/tasks/dep-y`);
    // the skipped slot's own row: the newest row may be a slot whose dep-x run is still going
    const row = tab
      .locator("#chain tbody tr")
      .filter({ has: tab.locator('td[data-task="dep-y"] .badge.skipped') })
      .first();
    await row.waitFor();
    expect(await row.locator('td[data-task="dep-y"]').innerText()).toMatch(/skipped\s+upstream dep-x failed/);
    expect(await row.locator('td[data-task="dep-x"] .badge.failed').count()).toBe(1);
  });

  it("run now with its downstream tasks: the downstream follows the manual slot", async () => {
    const tab = await page();
    await tab.goto(`${url}/dashboard/#/tasks/dep-m`);
    await tab.locator("#downstreams").waitFor();
    await tab.locator("#with-downstream").check();
    await tab.locator("#run-now").click();
    await tab.locator("#run-result", { hasText: "run requested, with its downstream tasks" }).waitFor();
    const manual = tab.locator("#chain tbody tr", { hasText: "manual" });
    await manual.locator('td[data-task="dep-n"] .badge.succeeded').waitFor({ timeout: 20_000 });
    expect(await manual.locator('td[data-task="dep-m"] .badge.succeeded').count()).toBe(1);
  });
});

import path from "node:path";
import type { Browser } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { AdminServer } from "../../src/admin/index.js";
import { ARTIFACTS, chromiumAvailable, dashboardServer, launchChromium } from "../helpers/chromium.js";
import { createTestDatabase, type TestDatabase } from "../helpers/database.js";
import { pollUntil, SchedulerHarness } from "../helpers/harness.js";

/** A task paused by failure in the dashboard (docs/behaviour.md, "Pause on failure"), headless Chromium. */

const available = chromiumAvailable;
const TOKEN = "dashboard-pause-token-0123456789";

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
      {
        name: "dash-pausing",
        handler: async () => {
          throw new Error("upstream said 503 (password=hunter2-secret)");
        },
      },
      { name: "dash-fine", handler: async () => {} },
    ],
    [
      { name: "dash-pausing", cron: "* * * * * *", pauseOnFailure: 2 },
      { name: "dash-fine", cron: "* * * * * *" },
    ],
  );
  ({ server, url } = await dashboardServer(harness, TOKEN));
  browser = await launchChromium();
  await pollUntil(
    "dash-pausing paused",
    async () => (await harness.scheduler.taskStatus("dash-pausing"))?.state === "paused",
  );
}, 120_000);

afterAll(async () => {
  await browser?.close();
  await server?.close();
  await harness?.stop();
  await db?.drop();
});

describe.skipIf(!available)("dashboard: pause on failure", () => {
  it("the list and the task page show the pause; Resume needs the token and re-enables the task", async () => {
    const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
    const tab = await context.newPage();
    tab.setDefaultTimeout(15_000);
    await tab.goto(`${url}/dashboard/`);
    const row = tab.locator('#tasks tr[data-task="dash-pausing"]');
    await row.locator(".badge", { hasText: "paused by failure" }).waitFor();
    expect(await tab.locator('#tasks tr[data-task="dash-fine"]').innerText()).not.toMatch(/paused/);
    await tab.selectOption("#show", "paused");
    await tab.locator('#tasks tr[data-task="dash-fine"]').waitFor({ state: "detached" });
    expect(await tab.locator("#tasks tbody tr").count()).toBe(1);

    await tab.goto(`${url}/dashboard/#/tasks/dash-pausing`);
    const notice = tab.locator("#paused");
    await notice.waitFor();
    expect(await notice.innerText()).toMatch(
      /Paused by failure .* after 2 failed slot\(s\) in a row: upstream said 503/,
    );
    expect(await tab.locator("main").innerText()).not.toContain("hunter2-secret");
    await tab.screenshot({ path: path.join(ARTIFACTS, "dashboard-paused.png"), fullPage: true });

    await tab.locator("#resume").click();
    await pollUntil("the refusal", async () =>
      /refused: missing bearer token/.test(await tab.locator("#resume-result").innerText()),
    );
    expect((await harness.scheduler.taskStatus("dash-pausing"))?.state).toBe("paused");

    await tab.fill("#token", TOKEN);
    await tab.click("#token-form button");
    await tab.locator("#resume:not([disabled])").click();
    // enabled again: it runs (and, still failing, pauses once more after two slots)
    await pollUntil("the resume in the audit trail", async () =>
      (await harness.scheduler.auditTrail({ task: "dash-pausing" })).some(
        (entry) => entry.kind === "resume" && entry.actor === "admin",
      ),
    );
    await context.close();
  });
});

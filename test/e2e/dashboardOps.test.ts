import path from "node:path";
import type { Browser } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { AdminServer } from "../../src/admin/index.js";
import { ARTIFACTS, chromiumAvailable, dashboardServer, launchChromium } from "../helpers/chromium.js";
import { createTestDatabase, type TestDatabase } from "../helpers/database.js";
import { pollUntil, SchedulerHarness } from "../helpers/harness.js";

/** Pause all (the banner on every page), the instances page and the run search in headless Chromium (docs/operations.md). */

const available = chromiumAvailable;
const TOKEN = "dashboard-ops-token-0123456789";

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
        name: "ops-ok",
        handler: async (context) => {
          context.logger.info("loaded the ledger-kiwi batch");
        },
      },
      {
        name: "ops-bad",
        handler: async () => {
          throw new Error("read ECONNRESET from gateway-kiwi");
        },
      },
    ],
    [
      { name: "ops-ok", cron: "* * * * * *" },
      { name: "ops-bad", cron: "* * * * * *" },
    ],
  );
  ({ server, url } = await dashboardServer(harness, TOKEN));
  browser = await launchChromium();
  await pollUntil("a failed and a succeeded run", async () => {
    const page = await harness.scheduler.fleet.searchRuns({ limit: 50 });
    return (
      page.runs.some((run) => run.task === "ops-bad" && run.outcome === "failed") &&
      page.runs.some((run) => run.task === "ops-ok" && run.outcome === "succeeded")
    );
  });
}, 120_000);

afterAll(async () => {
  await browser?.close();
  await server?.close();
  await harness?.stop();
  await db?.drop();
});

describe.skipIf(!available)("dashboard: operations", () => {
  it("the instances page lists this instance; Pause all shows a banner on every page until Resume all", async () => {
    const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
    const tab = await context.newPage();
    tab.setDefaultTimeout(15_000);
    await tab.goto(`${url}/dashboard/#/instances`);
    const row = tab.locator(`#instances tr[data-instance="${harness.scheduler.instanceId}"]`);
    await row.waitFor();
    expect(await row.innerText()).toMatch(/live/);
    expect(await tab.locator("#pause-banner").isHidden()).toBe(true);

    // acting needs the operator token
    await tab.fill("#pause-reason", "release freeze");
    await tab.click("#pause-all button");
    await pollUntil("the refusal", async () =>
      /refused: missing bearer token/.test(await tab.locator("#pause-result").innerText()),
    );
    expect(harness.scheduler.fleet.pauseState()).toBeUndefined();

    await tab.fill("#token", TOKEN);
    await tab.click("#token-form button");
    // the token re-renders the page: its new form (without the refusal) is the one to fill
    await tab.waitForFunction('document.getElementById("pause-result")?.textContent === ""');
    await tab.fill("#pause-reason", "release freeze");
    await tab.click("#pause-all button");
    const banner = tab.locator("#pause-banner");
    await banner.locator("#pause-text", { hasText: "release freeze" }).waitFor();
    expect(await banner.innerText()).toMatch(/All tasks are paused .* by admin: release freeze/);
    expect(harness.scheduler.fleet.pauseState()).toMatchObject({
      pausedBy: "admin",
      reason: "release freeze",
    });
    for (const route of ["#/", "#/timeline", "#/config", "#/search", "#/tasks/ops-ok"]) {
      await tab.goto(`${url}/dashboard/${route}`);
      await banner.locator("#pause-text", { hasText: "release freeze" }).waitFor();
    }
    await tab.screenshot({ path: path.join(ARTIFACTS, "dashboard-pause-all.png"), fullPage: true });

    await tab.fill("#resume-reason", "freeze over");
    await tab.click("#resume-all button");
    await banner.waitFor({ state: "hidden" });
    expect(harness.scheduler.fleet.pauseState()).toBeUndefined();
    const audit = await harness.scheduler.auditTrail({ task: "*" });
    expect(audit.map((entry) => [entry.kind, entry.actor, entry.newValue])).toEqual([
      ["resume-all", "admin", "off: freeze over"],
      ["pause-all", "admin", "on: release freeze"],
    ]);
    await context.close();
  });

  it("the timeline marks an instance that died, with the tasks whose runs were handed over", async () => {
    // as the liveness check records a death (test/integration/opsInstances.test.ts makes a real one)
    await db.pool.query(
      `INSERT INTO cronwarden_instance_deaths (instance_id, host, version, died_at, seen_by, handed_over)
       VALUES ('gone-7', 'host-a', '0.1.0', now() - interval '5 minutes', $1, '{ops-ok}')`,
      [harness.scheduler.instanceId],
    );
    const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
    const tab = await context.newPage();
    tab.setDefaultTimeout(15_000);
    await tab.goto(`${url}/dashboard/#/timeline?range=1h`);
    const death = tab.locator('#tl-deaths li[data-instance="gone-7"]');
    await death.waitFor();
    expect(await death.innerText()).toMatch(/instance gone-7 died .* runs handed over: ops-ok/);
    await tab.screenshot({ path: path.join(ARTIFACTS, "dashboard-instance-death.png"), fullPage: true });
    // and the instances page lists it dead
    await tab.goto(`${url}/dashboard/#/instances`);
    const row = tab.locator('#instances tr[data-instance="gone-7"]');
    await row.waitFor();
    expect(await row.innerText()).toMatch(/dead[\s\S]*host-a[\s\S]*handed over: ops-ok/);
    await context.close();
  });

  it("the search box finds runs by a word of their error and of their log lines", async () => {
    const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
    const tab = await context.newPage();
    tab.setDefaultTimeout(15_000);
    await tab.goto(`${url}/dashboard/`);
    await tab.click('a[data-nav="search"]');
    await tab.fill("#search-q", "ECONNRESET");
    await tab.click("#search-form button");
    const results = tab.locator("#search-results tbody tr");
    await results.first().waitFor();
    const byError = await results.allInnerTexts();
    expect(byError.length).toBeGreaterThan(0);
    expect(byError.every((text) => /ops-bad/.test(text) && /ECONNRESET/.test(text))).toBe(true);

    await tab.fill("#search-q", "ledger-kiwi");
    await tab.click("#search-form button");
    await tab.locator("#search-results tbody tr", { hasText: "ops-ok" }).first().waitFor();
    const byLog = await results.allInnerTexts();
    expect(byLog.every((text) => /ops-ok/.test(text))).toBe(true);

    await tab.fill("#search-q", "nothing-like-this-anywhere");
    await tab.click("#search-form button");
    await tab.locator("#search-results", { hasText: "no run matches" }).waitFor();
    await tab.screenshot({ path: path.join(ARTIFACTS, "dashboard-search.png"), fullPage: true });
    await context.close();
  });
});

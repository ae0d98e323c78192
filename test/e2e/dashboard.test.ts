import { existsSync } from "node:fs";
import { mkdir } from "node:fs/promises";
import path from "node:path";
import { type Browser, chromium, type Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type AdminServer, createAdminServer } from "../../src/admin/index.js";
import { createTestDatabase, type TestDatabase } from "../helpers/database.js";
import { pollUntil, SchedulerHarness } from "../helpers/harness.js";

/**
 * The dashboard end to end in headless Chromium (Debian's package, driven by playwright-core),
 * against a real scheduler and database. Screenshots land in test-artifacts/.
 */

const CHROMIUM = process.env.CHROMIUM_PATH ?? "/usr/bin/chromium";
const available = existsSync(CHROMIUM);
if (!available && process.env.CRONWARDEN_REQUIRE_CHROMIUM === "1") {
  throw new Error(
    `Chromium not found at ${CHROMIUM}: install it with "apt-get install -y chromium" (or set CHROMIUM_PATH)`,
  );
}
if (!available) {
  console.warn(
    `dashboard tests skipped: no Chromium at ${CHROMIUM}; "apt-get install -y chromium" enables them`,
  );
}
const ARTIFACTS = path.resolve("test-artifacts");
const TOKEN = "dashboard-test-token-0123456789";

let db: TestDatabase;
let harness: SchedulerHarness;
let server: AdminServer;
let url: string;
let browser: Browser;

beforeAll(async () => {
  if (!available) return;
  await mkdir(ARTIFACTS, { recursive: true });
  db = await createTestDatabase();
  harness = await SchedulerHarness.start(
    db.pool,
    [
      { name: "dash-ok", description: "always fine", handler: async () => {} },
      {
        name: "dash-broken",
        handler: async () => {
          throw new Error("upstream said 503 Service Unavailable");
        },
      },
      { name: "dash-manual", handler: () => new Promise((resolve) => setTimeout(resolve, 1500)) },
    ],
    [
      { name: "dash-ok", cron: "* * * * * *" },
      { name: "dash-broken", cron: "*/2 * * * * *" },
      { name: "dash-manual", cron: "0 0 0 1 1 *" },
    ],
  );
  server = createAdminServer({
    scheduler: harness.scheduler,
    port: 0,
    token: TOKEN,
    logger: harness.logs.logger,
  });
  ({ url } = await server.listen());
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: [
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
    ],
  });
  await Promise.all([harness.runsOf("dash-ok", 2), harness.runsOf("dash-broken", 1)]);
}, 120_000);

afterAll(async () => {
  await browser?.close();
  await server?.close();
  await harness?.stop();
  await db?.drop();
});

async function page(width = 1280): Promise<Page> {
  const context = await browser.newContext({ viewport: { width, height: 900 } });
  const opened = await context.newPage();
  opened.setDefaultTimeout(15_000);
  return opened;
}

describe.skipIf(!available)("dashboard", () => {
  it("lists the registered tasks with their states after real runs", async () => {
    const tab = await page();
    await tab.goto(`${url}/dashboard/`);
    const row = (name: string) => tab.locator(`#tasks tr[data-task="${name}"]`);
    await row("dash-ok").locator(".outcome .badge.succeeded").waitFor();
    await row("dash-broken").locator(".outcome .badge.failed").waitFor();
    expect(await tab.locator("#tasks tbody tr").count()).toBe(3);
    expect(await row("dash-ok").innerText()).toMatch(/Every second/);
    expect(await row("dash-ok").innerText()).toMatch(/\* \* \* \* \* \*/);
    expect(Number(await row("dash-broken").locator("td").nth(7).innerText())).toBeGreaterThanOrEqual(1);
    expect(await tab.locator(".notice").innerText()).toMatch(/changed in the config center, never here/);
    await tab.screenshot({ path: path.join(ARTIFACTS, "dashboard-tasks.png"), fullPage: true });

    await tab.fill("#filter", "broken");
    await pollUntil("the filter", async () => (await tab.locator("#tasks tbody tr").count()) === 1);
    await tab.context().close();
  });

  it("a task page shows a failed run's error, the next runs and the config entry", async () => {
    const tab = await page();
    await tab.goto(`${url}/dashboard/#/tasks/dash-broken`);
    await tab.locator("#history .badge.failed").first().waitFor();
    expect(await tab.locator("#history").innerText()).toMatch(/upstream said 503 Service Unavailable/);
    expect(await tab.locator("dl").innerText()).toMatch(/"cron":"\*\/2 \* \* \* \* \*"/);
    await tab.screenshot({ path: path.join(ARTIFACTS, "dashboard-task.png"), fullPage: true });
    await tab.context().close();
  });

  it("run-now without the token is refused; with it the run starts and the page shows it", async () => {
    const tab = await page();
    await tab.goto(`${url}/dashboard/#/tasks/dash-manual`);
    const button = tab.locator("#run-now");
    await button.waitFor();
    await button.click();
    await pollUntil("the refusal", async () =>
      /refused: missing bearer token/.test(await tab.locator("#run-result").innerText()),
    );

    await tab.fill("#token", TOKEN);
    await tab.click("#token-form button");
    await tab.locator("#run-now:not([disabled])").click();
    await tab.locator("h1 .badge.running").waitFor({ timeout: 10_000 });
    await tab.screenshot({ path: path.join(ARTIFACTS, "dashboard-run-now.png"), fullPage: true });
    await tab.locator("#history .badge.succeeded").first().waitFor({ timeout: 15_000 });
    // who asked: CRONWARDEN_ADMIN_TOKEN is the operator token named "admin"
    expect(await tab.locator("#history").innerText()).toMatch(/manual by admin/);
    await tab.context().close();
  });

  it("the config page shows the desired state and the last reconcile, and it works on a narrow screen", async () => {
    const tab = await page(390);
    await tab.goto(`${url}/dashboard/#/config`);
    await tab.locator("#entries tbody tr").first().waitFor();
    expect(await tab.locator("#entries").innerText()).toMatch(/dash-ok/);
    expect(await tab.locator("main").innerText()).toMatch(/Last reconcile/);
    const overflow = await tab.evaluate<number>("document.documentElement.scrollWidth - window.innerWidth");
    expect(overflow).toBeLessThanOrEqual(1);
    await tab.screenshot({ path: path.join(ARTIFACTS, "dashboard-config-narrow.png"), fullPage: true });
    await tab.context().close();
  });

  it("a data request without the token is refused when reads are protected", async () => {
    const open = createAdminServer({
      scheduler: harness.scheduler,
      port: 0,
      host: "0.0.0.0",
      token: TOKEN,
      logger: harness.logs.logger,
    });
    const { url: publicUrl } = await open.listen();
    try {
      const port = new URL(publicUrl).port;
      const tab = await page();
      await tab.goto(`http://127.0.0.1:${port}/dashboard/`);
      await tab.locator("#error:not([hidden])").waitFor();
      expect(await tab.locator("#error").innerText()).toMatch(/admin API refused: missing bearer token/);
      await tab.fill("#token", TOKEN);
      await tab.click("#token-form button");
      await tab.locator("#tasks tbody tr").first().waitFor();
      await tab.context().close();
    } finally {
      await open.close();
    }
  });
});

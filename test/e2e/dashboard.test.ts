import path from "node:path";
import type { Browser, Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type AdminServer, createAdminServer } from "../../src/admin/index.js";
import {
  ARTIFACTS,
  CHROMIUM,
  chromiumAvailable,
  dashboardServer,
  launchChromium,
} from "../helpers/chromium.js";
import { createTestDatabase, type TestDatabase } from "../helpers/database.js";
import { pollUntil, SchedulerHarness } from "../helpers/harness.js";
import { skipAPreLockedSlot } from "../helpers/preLock.js";

/**
 * The dashboard end to end in headless Chromium (Debian's package, driven by playwright-core),
 * against a real scheduler and database. Screenshots land in test-artifacts/.
 */

const available = chromiumAvailable;
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
const TOKEN = "dashboard-test-token-0123456789";

let db: TestDatabase;
let harness: SchedulerHarness;
let server: AdminServer;
let url: string;
let browser: Browser;
let releaseHold: () => void = () => {};

beforeAll(async () => {
  if (!available) return;
  db = await createTestDatabase();
  harness = await SchedulerHarness.start(
    db.pool,
    [
      { name: "dash-ok", description: "always fine", handler: async () => {} },
      {
        name: "dash-broken",
        handler: async (ctx) => {
          ctx.logger.info("calling upstream with password=hunter2-secret");
          throw new Error("upstream said 503 Service Unavailable");
        },
      },
      { name: "dash-manual", handler: () => new Promise((resolve) => setTimeout(resolve, 1500)) },
      {
        name: "dash-flaky",
        retry: { maxRetries: 1, delayMs: 100 },
        handler: async (ctx) => {
          if (ctx.attempt === 1) throw new Error("first attempt fails");
        },
      },
      {
        name: "dash-hold",
        handler: () =>
          new Promise<void>((resolve) => {
            releaseHold = resolve;
          }),
      },
      { name: "dash-skip", handler: async () => {} },
    ],
    [
      { name: "dash-ok", cron: "* * * * * *" },
      { name: "dash-broken", cron: "*/2 * * * * *" },
      { name: "dash-manual", cron: "0 0 0 1 1 *" },
      { name: "dash-flaky", cron: "*/3 * * * * *" },
      { name: "dash-hold", cron: "0 0 0 1 1 *" },
      { name: "dash-skip", cron: "*/5 * * * * *" },
    ],
  );
  ({ server, url } = await dashboardServer(harness, TOKEN));
  browser = await launchChromium();
  await Promise.all([harness.runsOf("dash-ok", 2), harness.runsOf("dash-broken", 1)]);
  // a skip: the task is disabled after Agenda pre-locked its slot (then enabled again)
  await skipAPreLockedSlot(db.pool, harness.scheduler, "dash-skip");
  await db.pool.query("UPDATE agenda_jobs SET disabled = false WHERE name = 'dash-skip'");
  await pollUntil("dash-flaky's retried slot", async () =>
    (await harness.scheduler.runs("dash-flaky", 10)).some((run) => run.attempt === 2),
  );
  await harness.scheduler.runNow("dash-hold");
  await pollUntil(
    "dash-hold to be running",
    async () => (await harness.scheduler.taskStatus("dash-hold"))?.running,
  );
}, 120_000);

afterAll(async () => {
  releaseHold();
  await browser?.close();
  await server?.close();
  await harness?.stop();
  await db?.drop();
});

async function page(width = 1280, colorScheme: "light" | "dark" = "light"): Promise<Page> {
  const context = await browser.newContext({ viewport: { width, height: 900 }, colorScheme });
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
    expect(await tab.locator("#tasks tbody tr").count()).toBe(6);
    expect(await row("dash-ok").innerText()).toMatch(/Every second/);
    expect(await row("dash-ok").innerText()).toMatch(/\* \* \* \* \* \*/);
    expect(Number(await row("dash-broken").locator("td").nth(7).innerText())).toBeGreaterThanOrEqual(1);
    // the unit is on the page: slots, with the attempts beside them
    const failuresHeader = tab.locator('#tasks th[data-sort="failures"]');
    expect(await failuresHeader.innerText()).toBe("Failed slots");
    expect(await failuresHeader.getAttribute("title")).toMatch(/a slot counts once, by its final attempt/);
    expect(await row("dash-broken").locator("td").nth(7).getAttribute("title")).toMatch(
      /^\d+ failed slots? in a row \(\d+ attempts?\)$/,
    );
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
    expect(await tab.locator("#failed-slots").innerText()).toMatch(
      /^\d+ failed slots? in a row( \(\d+ attempts?\))?$/,
    );
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

  it("the timeline marks each slot with its state: succeeded, failed, retried, skipped with its reason, running", async () => {
    const tab = await page();
    // a few minutes across: one mark per slot (over 1 h, marks a few pixels apart are summed)
    const from = new Date(Date.now() - 180_000).toISOString();
    const to = new Date(Date.now() + 60_000).toISOString();
    await tab.goto(`${url}/dashboard/#/timeline?range=custom&from=${from}&to=${to}`);
    await tab.locator("#timeline[data-render-ms]").waitFor();
    expect(await tab.locator("#tl-names .tl-name").count()).toBe(6);
    expect(await tab.locator("#tl-legend").innerText()).toMatch(
      /succeeded.*failed.*interrupted.*skipped.*missed.*running.*upcoming/s,
    );
    await tab.locator("#tl-list-wrap summary").click();
    const marks = (task: string, outcome: string) =>
      tab.locator(`#tl-list tr[data-task="${task}"][data-outcome="${outcome}"]`);
    await marks("dash-ok", "succeeded").first().waitFor();
    expect(await marks("dash-ok", "succeeded").count()).toBeGreaterThanOrEqual(2);
    expect(await marks("dash-broken", "failed").first().innerText()).toMatch(/upstream said 503/);
    // a retried slot: its failed attempt and the succeeded retry (one bucket when they share a pixel)
    const flaky = (await tab.locator('#tl-list tr[data-task="dash-flaky"]').allInnerTexts()).join("\n");
    expect(flaky).toMatch(/1 failed, 1 succeeded|1 succeeded, 1 failed/);
    expect(await marks("dash-skip", "skipped").first().innerText()).toMatch(
      /disabled after this slot was locked/,
    );
    expect(await marks("dash-hold", "running").count()).toBe(1);
    await tab.screenshot({ path: path.join(ARTIFACTS, "dashboard-timeline.png"), fullPage: true });

    // the keyboard reaches every mark: the detail panel shows the selected run. The view refreshes
    // every 15 s (a new canvas, the focus gone); a reload starts that period again for the walk
    await tab.reload();
    await tab.locator("#timeline[data-render-ms]").waitFor();
    await tab.locator("#tl-canvas").focus();
    await tab.keyboard.press("ArrowRight");
    await tab.locator("#tl-detail[data-outcome]").waitFor();
    expect(await tab.locator("#tl-detail").innerText()).toMatch(/dash-broken/);
    for (let step = 0; step < 12; step++) {
      await tab.keyboard.press("ArrowDown");
      if ((await tab.locator("#tl-detail").getAttribute("data-task")) === "dash-hold") break;
    }
    expect(await tab.locator("#tl-detail").getAttribute("data-outcome")).toBe("running");
    // hovering a mark shows the same run in a tooltip
    const box = await tab.locator("#tl-canvas").boundingBox();
    if (!box) throw new Error("no canvas box");
    let shown = false;
    for (let x = box.width - 2; x > 0 && !shown; x -= 3) {
      await tab.mouse.move(box.x + x, box.y + 26 + 11);
      shown = await tab.locator("#tl-tip:not([hidden])").isVisible();
    }
    expect(shown).toBe(true);
    expect(await tab.locator("#tl-tip").innerText()).toMatch(/dash-broken/);

    // 24 h (the default) and 7 d draw too; a custom range is taken from the form
    await tab.goto(`${url}/dashboard/#/timeline`);
    await tab.locator('a.button[aria-pressed="true"]', { hasText: "24 h" }).waitFor();
    await tab.locator("#timeline[data-render-ms]").waitFor();
    await tab.goto(`${url}/dashboard/#/timeline?range=7d`);
    await tab.locator('a.button[aria-pressed="true"]', { hasText: "7 d" }).waitFor();
    await tab.locator("#tl-custom button").click();
    await pollUntil("the custom range", async () => tab.url().includes("range=custom"));
    await tab.locator("#timeline[data-render-ms]").waitFor();
    await tab.context().close();
  });

  it("history pages back to the oldest run, filters by outcome, and links to a run", async () => {
    // more runs than one page of the history (25), so that an older page exists: dash-ok runs every
    // second, and on a quick machine the tests before this one can take less than 25 s
    await pollUntil(
      "more than a page of dash-ok's runs",
      async () => (await harness.scheduler.runHistory({ task: "dash-ok", limit: 26 })).runs.length > 25,
      { timeoutMs: 30_000 },
    );
    const tab = await page();
    await tab.goto(`${url}/dashboard/#/tasks/dash-ok`);
    await tab.locator("#history tbody tr[data-run]").first().waitFor();
    // The newest page refreshes itself (new runs of a task due every second): its rows, and the
    // cursor of its "Older" link, can change between a read and a click. Older pages stay put, so
    // the rows are collected from the first older page on, each waited for by its own cursor.
    await tab.locator("#history-older").click();
    await pollUntil("the first older page", async () =>
      Boolean(await tab.locator("#history").getAttribute("data-cursor")),
    );
    const seen: string[] = [];
    for (let pages = 0; pages < 100; pages++) {
      const ids = await tab
        .locator("#history tbody tr[data-run]")
        .evaluateAll((rows) => rows.map((row) => row.getAttribute("data-run") ?? ""));
      seen.push(...ids);
      if (await tab.locator("#history-end").isVisible()) break;
      const href = (await tab.locator("#history-older").getAttribute("href")) ?? "";
      const cursor = new URLSearchParams(href.split("?")[1] ?? "").get("cursor");
      expect(cursor).toBeTruthy();
      await tab.locator("#history-older").click();
      await pollUntil(
        "the older page",
        async () => (await tab.locator("#history").getAttribute("data-cursor")) === cursor,
      );
    }
    expect(await tab.locator("#history-end").innerText()).toMatch(/oldest run reached/);
    const oldest = (await harness.scheduler.runHistory({ task: "dash-ok", limit: 500 })).runs.at(-1);
    expect(seen.at(-1)).toBe(oldest?.id);
    expect(new Set(seen).size).toBe(seen.length);

    // Going from one task's page to another is a change of the address's fragment: the previous task's
    // page stays in view until the new one's data arrives, and its form, filled in then, filters the
    // previous task. So the form is used only once dash-flaky's page is shown, and an address that
    // filters another task is replaced by dash-flaky's again.
    await tab.goto(`${url}/dashboard/#/tasks/dash-flaky`);
    const showsFlaky = async () =>
      /^dash-flaky\b/.test((await tab.locator("#view h1").first().textContent({ timeout: 2_000 })) ?? "");
    await pollUntil("the filtered history", async () => {
      if (tab.url().includes("outcome=failed")) {
        if (tab.url().includes("/tasks/dash-flaky?")) return true;
        await tab.goto(`${url}/dashboard/#/tasks/dash-flaky`);
        return false;
      }
      if (!(await showsFlaky().catch(() => false))) return false;
      await tab.locator("#f-outcome").selectOption("failed");
      await tab.locator("#history-filter button").click();
      return false;
    });
    // the filtered page has replaced the first one: every run listed failed
    await pollUntil("only dash-flaky's failed runs listed", async () => {
      const outcomes = await tab.locator("#history tbody tr[data-run] .badge").allInnerTexts();
      return (
        (await showsFlaky().catch(() => false)) &&
        outcomes.length >= 1 &&
        outcomes.every((text) => /failed/.test(text))
      );
    });
    await tab.screenshot({ path: path.join(ARTIFACTS, "dashboard-history-filtered.png"), fullPage: true });
    await tab.locator("#history tbody tr[data-run] a").first().click();
    await tab.locator("#run-facts").waitFor();
    expect(await tab.locator("#run-facts").innerText()).toMatch(/retried after this/);
    await tab.context().close();
  }, 90_000);

  it("a run's detail shows the error's stack and the handler's log lines, the secret redacted", async () => {
    const tab = await page();
    await tab.goto(`${url}/dashboard/#/tasks/dash-broken`);
    await tab.locator("#history tbody tr[data-run] a").first().click();
    await tab.locator("#run-stack").waitFor();
    expect(await tab.locator("#run-stack").innerText()).toMatch(
      /^Error: upstream said 503 Service Unavailable\n\s+at /,
    );
    const facts = await tab.locator("#run-facts").innerText();
    for (const label of ["Slot", "Started", "Ended", "Duration", "Attempt", "Trigger", "Instance"])
      expect(facts).toContain(label);
    expect(facts).toContain(harness.scheduler.settings.instanceId);
    expect(await tab.locator("#run-logs").innerText()).toMatch(/calling upstream with password=\*\*\*/);
    expect(await tab.locator("main").innerText()).not.toMatch(/hunter2/);
    await tab.screenshot({ path: path.join(ARTIFACTS, "dashboard-run.png"), fullPage: true });
    await tab.context().close();
  });

  it("at 390 px no page overflows sideways and the tasks table keeps name, state and last outcome in view", async () => {
    const [run] = (await harness.scheduler.runHistory({ task: "dash-broken", limit: 1 })).runs;
    const pages = {
      tasks: "#/",
      timeline: "#/timeline",
      task: "#/tasks/dash-broken",
      run: `#/runs/${run?.id}`,
      config: "#/config",
    };
    for (const scheme of ["light", "dark"] as const) {
      const tab = await page(390, scheme);
      for (const [name, hash] of Object.entries(pages)) {
        await tab.goto(`${url}/dashboard/${hash}`);
        await tab.locator("main h1").waitFor();
        if (name === "timeline") await tab.locator("#timeline[data-render-ms]").waitFor();
        if (name === "tasks")
          await tab.locator('#tasks tr[data-task="dash-broken"] .outcome .badge').waitFor();
        const overflow = await tab.evaluate<number>(
          "document.documentElement.scrollWidth - window.innerWidth",
        );
        expect(overflow, `${name} (${scheme})`).toBeLessThanOrEqual(1);
        if (name === "tasks") {
          for (const cell of ["td:nth-child(1)", "td:nth-child(2)", ".outcome"]) {
            const box = await tab.locator(`#tasks tr[data-task="dash-broken"] ${cell}`).boundingBox();
            expect(box, cell).not.toBeNull();
            expect((box?.x ?? 0) + (box?.width ?? 0), cell).toBeLessThanOrEqual(390);
          }
          expect(await tab.locator('#tasks tr[data-task="dash-broken"] .outcome').innerText()).toMatch(
            /failed/,
          );
        }
        await tab.screenshot({
          path: path.join(ARTIFACTS, `dashboard-${name}-390-${scheme}.png`),
          fullPage: true,
        });
      }
      await tab.context().close();
    }
  });

  it("follows prefers-color-scheme: dark colours on every page, screenshots kept", async () => {
    for (const scheme of ["light", "dark"] as const) {
      const tab = await page(1280, scheme);
      await tab.goto(`${url}/dashboard/#/timeline?range=1h`);
      await tab.locator("#timeline[data-render-ms]").waitFor();
      const background = await tab.evaluate<string>("getComputedStyle(document.body).backgroundColor");
      expect(background).toBe(scheme === "dark" ? "rgb(13, 17, 23)" : "rgb(255, 255, 255)");
      // the canvas reads the theme's colours when it draws
      const canvasInk = await tab.evaluate<string>(
        "getComputedStyle(document.documentElement).getPropertyValue('--muted').trim()",
      );
      expect(canvasInk).toBe(scheme === "dark" ? "#8b949e" : "#57606a");
      await tab.screenshot({
        path: path.join(ARTIFACTS, `dashboard-timeline-${scheme}.png`),
        fullPage: true,
      });
      for (const [name, hash] of Object.entries({
        tasks: "#/",
        task: "#/tasks/dash-ok",
        config: "#/config",
      })) {
        await tab.goto(`${url}/dashboard/${hash}`);
        await tab.locator("main h1").waitFor();
        await tab.waitForTimeout(0);
        await tab.screenshot({
          path: path.join(ARTIFACTS, `dashboard-${name}-${scheme}.png`),
          fullPage: true,
        });
      }
      await tab.context().close();
    }
  });
});

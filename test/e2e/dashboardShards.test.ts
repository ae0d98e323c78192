import path from "node:path";
import type { Browser, Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { AdminServer } from "../../src/admin/index.js";
import { ARTIFACTS, chromiumAvailable, dashboardServer, launchChromium } from "../helpers/chromium.js";
import { createTestDatabase, type TestDatabase } from "../helpers/database.js";
import { pollUntil, SchedulerHarness } from "../helpers/harness.js";

/**
 * A sharded slot in the dashboard (docs/dashboard.md, docs/sharding.md), headless Chromium against
 * a real scheduler: the timeline shows the slot's shard progress while it runs (done/total, the
 * failed shards named) and once it ended, and the run page lists its shards with their state,
 * instance, duration and error.
 */

const available = chromiumAvailable;
const TOKEN = "dashboard-shards-token-0123456789";
const SHARDS = 12;
const FAILING = new Set([3, 7]);
/** Shards from this index wait for the gate: the slot stays running with 8 of 12 ended. */
const HELD_FROM = 8;

let db: TestDatabase;
let harness: SchedulerHarness;
let server: AdminServer;
let url: string;
let browser: Browser;
let openGate: () => void = () => {};
const gate = new Promise<void>((resolve) => {
  openGate = resolve;
});
let slot: Date;

async function progress() {
  const { rows } = await db.pool.query<{ state: string; n: number }>(
    "SELECT state, count(*)::int AS n FROM cronwarden_shards WHERE task_name = 'dash-sharded' GROUP BY state",
  );
  return Object.fromEntries(rows.map((row) => [row.state, row.n]));
}

beforeAll(async () => {
  if (!available) return;
  db = await createTestDatabase();
  slot = new Date(Math.ceil((Date.now() + 4_000) / 1000) * 1000);
  harness = await SchedulerHarness.start(
    db.pool,
    [
      {
        name: "dash-sharded",
        handler: async (ctx) => {
          const index = ctx.shard?.index ?? -1;
          if (FAILING.has(index)) throw new Error(`region ${String(ctx.shard?.parameter)} refused`);
          if (index >= HELD_FROM) await gate;
          await new Promise((resolve) => setTimeout(resolve, 20));
          return { index };
        },
        reduce: async () => {},
      },
      { name: "dash-plain", handler: async () => {} },
    ],
    [
      {
        name: "dash-sharded",
        at: slot.toISOString(),
        shards: SHARDS,
        shardParameters: Array.from({ length: SHARDS }, (_, index) => `r${index}`),
      },
      { name: "dash-plain", cron: "* * * * * *" },
    ],
  );
  ({ server, url } = await dashboardServer(harness, TOKEN));
  browser = await launchChromium();
}, 120_000);

afterAll(async () => {
  openGate();
  await browser?.close();
  await server?.close();
  await harness?.stop();
  await db?.drop();
});

async function page(): Promise<Page> {
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  const tab = await context.newPage();
  tab.setDefaultTimeout(15_000);
  return tab;
}

/** The timeline over a few minutes around the slot, its marks as a table; the sharded task's row. */
async function timelineRow(tab: Page, outcome: string) {
  const from = new Date(slot.getTime() - 120_000).toISOString();
  const to = new Date(slot.getTime() + 120_000).toISOString();
  await tab.goto(`${url}/dashboard/#/timeline?range=custom&from=${from}&to=${to}&visit=${Date.now()}`);
  await tab.locator("#timeline[data-render-ms]").waitFor();
  await tab.locator("#tl-list-wrap summary").click();
  const row = tab.locator(`#tl-list tr[data-task="dash-sharded"][data-outcome="${outcome}"]`);
  await row.waitFor();
  return row;
}

describe.skipIf(!available)("dashboard: sharded slots", () => {
  it("the timeline shows a running slot's shard progress, then its end; the run page lists its shards", async () => {
    // running: 8 of 12 ended (2 of them failed), 4 held
    await pollUntil(
      "8 shards ended, 4 running",
      async () => {
        const counts = await progress();
        return counts.succeeded === 6 && counts.failed === 2 && counts.running === 4;
      },
      { timeoutMs: 60_000, intervalMs: 100 },
    );
    const tab = await page();
    const running = await timelineRow(tab, "running");
    expect(await running.innerText()).toMatch(
      /shards 8\/12 done · 4 running · 2 failed: 3, 7 · reduce waiting/,
    );
    // the detail under the plot (a mark selected by the keyboard) shows the same
    await tab.locator("#tl-canvas").focus();
    await tab.keyboard.press("ArrowRight"); // the first row's first mark (dash-plain), then down a row
    await tab.locator("#tl-detail[data-task]").waitFor();
    await tab.keyboard.press("ArrowDown");
    await tab.locator("#tl-detail[data-task='dash-sharded']").waitFor();
    expect(await tab.locator("#tl-detail").innerText()).toMatch(/shards 8\/12 done .* 2 failed: 3, 7/s);
    await tab.screenshot({ path: path.join(ARTIFACTS, "dashboard-shards-running.png"), fullPage: true });

    openGate();
    await pollUntil(
      "the slot's run recorded",
      async () => (await harness.scheduler.runs("dash-sharded", 5)).find((run) => run.outcome === "failed"),
      { timeoutMs: 60_000, intervalMs: 200 },
    );
    const ended = await timelineRow(tab, "failed");
    const text = await ended.innerText();
    expect(text).toMatch(/shards 12\/12 done · 2 failed: 3, 7 · reduce succeeded/);
    expect(text).toMatch(/2 of 12 shard\(s\) failed \(3, 7\)/);

    // the run page: every shard with its state, instance, duration and error
    await ended.locator("a", { hasText: "open" }).click();
    const table = tab.locator("#run-shards");
    await table.waitFor();
    expect(await tab.locator("#run-shards-summary").innerText()).toMatch(
      /Round 1: 12 shard\(s\): 10 succeeded, 2 failed|Round 1: 12 shard\(s\): 2 failed, 10 succeeded/,
    );
    expect(await tab.locator("#run-shards-summary").innerText()).toMatch(/reduce succeeded/);
    expect(await table.locator("tbody tr").count()).toBe(SHARDS);
    // failed ones first, each named with its error
    expect(await table.locator("tbody tr").first().getAttribute("data-shard")).toBe("3");
    const failed = await table.locator('tr[data-shard="7"]').innerText();
    expect(failed).toMatch(/failed/);
    expect(failed).toContain(harness.scheduler.instanceId);
    expect(failed).toMatch(/region r7 refused/);
    const held = await table.locator('tr[data-shard="9"]').innerText();
    expect(held).toMatch(/succeeded/);
    expect(held).toContain(harness.scheduler.instanceId);
    expect(held).toMatch(/\d+(\.\d)? (ms|s)/);
    await tab.screenshot({ path: path.join(ARTIFACTS, "dashboard-shards-run.png"), fullPage: true });

    // a run of a task that is not sharded has no shard section (its 404 is not an error)
    await timelineRow(tab, "failed");
    await tab.locator('#tl-list tr[data-task="dash-plain"] a', { hasText: "open" }).first().click();
    await tab.locator("#run-facts").waitFor();
    expect(await tab.locator("#run-shards").count()).toBe(0);
    expect(await tab.locator("main").innerText()).not.toMatch(/Shards|could not read/);
    expect(await tab.locator("#error").isHidden()).toBe(true);
    await tab.context().close();
  });
});

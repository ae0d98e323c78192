import { existsSync } from "node:fs";
import { mkdir } from "node:fs/promises";
import path from "node:path";
import { type Browser, chromium } from "playwright-core";
import { type AdminServer, createAdminServer } from "../../src/admin/index.js";
import type { SchedulerHarness } from "./harness.js";

/** What the dashboard tests (test/e2e/) share: Debian's Chromium, headless, and an admin server with a token. */

export const CHROMIUM = process.env.CHROMIUM_PATH ?? "/usr/bin/chromium";
/** Without Chromium the dashboard tests are skipped (.ci/run installs it and requires them). */
export const chromiumAvailable = existsSync(CHROMIUM);
/** Screenshots of the pages, kept for a look after a failure. */
export const ARTIFACTS = path.resolve("test-artifacts");

/** Headless Chromium, with the screenshots' folder made. */
export async function launchChromium(): Promise<Browser> {
  await mkdir(ARTIFACTS, { recursive: true });
  return chromium.launch({
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
}

/** The admin API and dashboard of a harness's scheduler, listening on a free port, with one operator token. */
export async function dashboardServer(
  harness: SchedulerHarness,
  token: string,
): Promise<{ server: AdminServer; url: string }> {
  const server = createAdminServer({
    scheduler: harness.scheduler,
    port: 0,
    token,
    logger: harness.logs.logger,
  });
  const { url } = await server.listen();
  return { server, url };
}

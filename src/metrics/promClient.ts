import { createRequire } from "node:module";
import type * as PromClient from "prom-client";

/**
 * prom-client, loaded by the first createMetrics() rather than by every process that imports
 * cronwarden: a scheduler without metrics does not carry it. It is a CommonJS package, so it loads
 * synchronously here.
 */
export function promClient(): typeof PromClient {
  return createRequire(import.meta.url)("prom-client") as typeof PromClient;
}

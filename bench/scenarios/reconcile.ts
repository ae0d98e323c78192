/**
 * Reconcile (cronwarden only; raw Agenda has no desired state to reconcile): see
 * bench/workers/reconcile.ts for the steps. One process, its own database and folder.
 */
import { mkdir } from "node:fs/promises";
import path from "node:path";
import { Worker } from "../lib/children.js";
import { type BenchContext, POOL_MAX } from "../lib/common.js";
import type { ReconcileFigures, ReconcileSpec } from "../lib/protocol.js";

export async function runReconcile(context: BenchContext, count: number): Promise<ReconcileFigures> {
  const database = `bench_reconcile_${count}`;
  const workDir = path.join(context.dir, database);
  await mkdir(workDir, { recursive: true });
  const spec: ReconcileSpec = {
    databaseUrl: await context.pg.createDatabase(database),
    count,
    workDir,
    poolMax: POOL_MAX,
    edits: context.sizes.reconcileEdits,
  };
  const worker = new Worker({
    label: `reconcile-${count}`,
    worker: "reconcile",
    spec,
    logDir: context.logDir,
  });
  try {
    await worker.waitUntil(
      "reconcile figures",
      () => worker.messages.some((message) => message.type === "reconcile"),
      5 * 60_000 + count * 100,
    );
    const message = worker.messages.find((candidate) => candidate.type === "reconcile");
    if (message?.type !== "reconcile") throw new Error("no reconcile figures");
    return message.figures;
  } finally {
    await worker.stop(10_000);
    await context.pg.dropDatabase(database).catch(() => {});
  }
}

import type { Logger } from "../core/logger.js";
import { createdWritten, flagWritten, reportWritten, retimedWritten } from "./actionWrites.js";
import type { ReconcileTarget, ReconcileTrigger } from "./configReconciler.js";
import type { LiveJob, ReconcileAction } from "./reconcilePlan.js";

/** Actions per call of a batch write: what is done is known batch by batch, for the audit. */
const ACTIONS_PER_BATCH = 2_000;

type Create = Extract<ReconcileAction, { kind: "create" }>;
type Update = Extract<ReconcileAction, { kind: "update" }>;
type Flag = Extract<ReconcileAction, { kind: "enable" | "disable" }>;

/** The target's writes of many rows (src/engine/jobBatchWrites.ts); a target without them writes one by one. */
export type BatchTarget = Required<
  Pick<ReconcileTarget, "createJobs" | "updateSchedules" | "setEnabledMany">
>;

export function batchTarget(target: ReconcileTarget): BatchTarget | undefined {
  const { createJobs, updateSchedules, setEnabledMany } = target;
  if (!createJobs || !updateSchedules || !setEnabledMany) return undefined;
  return {
    createJobs: createJobs.bind(target),
    updateSchedules: updateSchedules.bind(target),
    setEnabledMany: setEnabledMany.bind(target),
  };
}

/**
 * The first action of each task, when it is one the target writes for many rows in one statement
 * (a plain create, a re-timing of a cron or interval, an enable or disable), is applied here, in
 * batches, before the tasks' other actions: so each task's actions keep their order. Marks in
 * `done` what was written and logs it as applyAction (src/reconcile/actionWrites.ts) does; an
 * action left unmarked (a one-shot, a run that started meanwhile) is the caller's to apply alone.
 * A batch that fails throws; the batches before it stay marked done.
 */
export async function applyFirstInBatches(
  target: BatchTarget,
  actions: readonly ReconcileAction[],
  firsts: readonly number[],
  done: boolean[],
  context: {
    trigger: ReconcileTrigger;
    now: () => Date;
    logger: Logger;
    liveByName: ReadonlyMap<string, LiveJob>;
  },
): Promise<void> {
  const creates: number[] = [];
  const updates: number[] = [];
  const flags: number[] = [];
  for (const index of firsts) {
    const action = actions[index] as ReconcileAction;
    if (action.kind === "create" && !action.after) creates.push(index);
    else if (action.kind === "update" && !action.after && !action.changes.some((c) => c.field === "after"))
      updates.push(index);
    else if (action.kind === "enable" || action.kind === "disable") flags.push(index);
  }
  const { trigger, logger } = context;
  for (const batch of chunks(creates)) {
    const jobs = batch.map((index) => actions[index] as Create);
    const written = await target.createJobs(
      jobs.map(({ task, cron, timezone, enabled }) => ({ name: task, cron, timezone, enabled })),
    );
    batch.forEach((index, at) => {
      const action = jobs[at] as Create;
      if (!written.has(action.task)) return;
      done[index] = true;
      reportWritten(action, createdWritten(action), trigger, logger);
    });
  }
  for (const batch of chunks(updates)) {
    const changes = batch.map((index) => actions[index] as Update);
    const written = await target.updateSchedules(
      changes.map(({ task, cron, timezone }) => ({ name: task, cron, timezone })),
      context.now(),
    );
    batch.forEach((index, at) => {
      const action = changes[at] as Update;
      const nextRunAt = written.get(action.task);
      if (!nextRunAt) return;
      done[index] = true;
      reportWritten(action, retimedWritten(action, nextRunAt), trigger, logger);
    });
  }
  for (const batch of chunks(flags)) {
    const changes = batch.map((index) => actions[index] as Flag);
    await target.setEnabledMany(
      changes.map((action) => ({ name: action.task, enabled: action.kind === "enable" })),
    );
    batch.forEach((index, at) => {
      const action = changes[at] as Flag;
      done[index] = true;
      reportWritten(action, flagWritten(action, context.liveByName.get(action.task)), trigger, logger);
    });
  }
}

function* chunks(indexes: readonly number[]): Generator<number[]> {
  for (let from = 0; from < indexes.length; from += ACTIONS_PER_BATCH)
    yield indexes.slice(from, from + ACTIONS_PER_BATCH);
}

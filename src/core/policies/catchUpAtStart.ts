import {
  type CatchUpDecision,
  type CatchUpPolicy,
  type CatchUpRuns,
  DEFAULT_CATCH_UP,
  decideCatchUp,
  type SlotSource,
} from "./catchUp.js";
import { dueAt, slotOfDue } from "./jitter.js";
import { DEFAULT_OVERLAP, OVERLAP_POLICIES, type OverlapPolicy } from "./overlap.js";
import { isKnownTimezone, nextSlot, scheduleOf, slotsBetween } from "./schedule.js";

/**
 * Where a task's policies live in its job row: `data.policy`, written by the reconciler from the
 * config (src/engine/sql.ts setPolicy), read back with each lock. A row without one (created
 * before policies existed) follows the defaults.
 */
export const POLICY_DATA_KEY = "policy";

/** The policies as stored in the job row. */
export interface StoredPolicy {
  catchUp: CatchUpPolicy;
  /** The task's jitter in ms (0: none), src/core/policies/jitter.ts. */
  jitterMs: number;
  /** src/core/policies/overlap.ts */
  overlap: OverlapPolicy;
}

export const DEFAULT_POLICY: StoredPolicy = {
  catchUp: DEFAULT_CATCH_UP,
  jitterMs: 0,
  overlap: DEFAULT_OVERLAP,
};

const RUNS: readonly CatchUpRuns[] = ["none", "latest", "all"];

/** The policies of a job row's data; the defaults for anything missing or unreadable. */
export function policyOfData(data: unknown): StoredPolicy {
  const stored =
    typeof data === "object" && data !== null
      ? (data as Record<string, unknown>)[POLICY_DATA_KEY]
      : undefined;
  if (typeof stored !== "object" || stored === null) return DEFAULT_POLICY;
  const { catchUp, jitterMs, overlap } = stored as Record<string, unknown>;
  const jitter = typeof jitterMs === "number" && Number.isFinite(jitterMs) && jitterMs > 0 ? jitterMs : 0;
  return {
    catchUp: catchUpOf(catchUp),
    jitterMs: jitter,
    overlap: OVERLAP_POLICIES.includes(overlap as OverlapPolicy)
      ? (overlap as OverlapPolicy)
      : DEFAULT_OVERLAP,
  };
}

function catchUpOf(catchUp: unknown): CatchUpPolicy {
  if (typeof catchUp !== "object" || catchUp === null) return DEFAULT_CATCH_UP;
  const { windowMs, runs } = catchUp as Record<string, unknown>;
  if (typeof windowMs !== "number" || !Number.isFinite(windowMs) || windowMs < 0) return DEFAULT_CATCH_UP;
  if (!RUNS.includes(runs as CatchUpRuns)) return DEFAULT_CATCH_UP;
  return { windowMs, runs: runs as CatchUpRuns };
}

/** A stored schedule's slots (cron under the DST rule, or an interval), for decideCatchUp. */
export function slotSource(repeatInterval: string, timezone: string): SlotSource {
  const schedule = scheduleOf(repeatInterval);
  return {
    between: (from, to, limit) => slotsBetween(repeatInterval, timezone, from, to, limit),
    newestAtOrBefore(time) {
      if (schedule.kind === "every") return Math.floor(time / schedule.everyMs) * schedule.everyMs;
      if (schedule.kind === "at") return schedule.at <= time ? schedule.at : undefined;
      // look back 1 min, 2 min, 4 min... (one slot a year at most is ~19 doublings)
      for (let back = 60_000; back < 800 * 86_400_000; back *= 2) {
        const { slots } = slotsBetween(repeatInterval, timezone, time - back, time, 10_000);
        if (slots.length > 0) return slots.at(-1);
      }
      return undefined;
    },
  };
}

export interface StartInput {
  taskName: string;
  cron: string | null;
  timezone: string | null;
  data: unknown;
  /** The slot the row held when locked. */
  storedSlot: Date;
  /** When the run starts (Agenda's `lastRunAt`). */
  now: Date;
  graceMs: number;
  /** The row's `last_finished_at` when locked: the previous run's end. */
  previousRunEndedAt: Date | null;
  /** The slot the previous run was for, as its start save wrote it in the row (none: unknown). */
  previousRunSlot?: Date | undefined;
  /** A takeover re-run or a run-now: its slot is not a scheduled one to decide about. */
  rerunOrManual: boolean;
}

export interface StartPlan {
  /** The slot the stored due time stands for (the due time minus its jitter). */
  slot: Date;
  decision: CatchUpDecision;
  /** The next run the row gets, or undefined: keep Agenda's. */
  nextRunAt: Date | undefined;
}

/** The catch-up decision and the next run for a run that starts; undefined: Agenda's own handling. */
export function planRunStart(input: StartInput): StartPlan | undefined {
  if (!input.cron) return undefined;
  const timezone = input.timezone ?? "UTC";
  if (!isKnownTimezone(timezone)) return undefined; // Agenda's computation stands
  const policy = policyOfData(input.data);
  const { jitterMs } = policy;
  const due = input.storedSlot.getTime();
  // the row holds slot + jitter: back to the slot (a due time that is no jittered slot stands as its own)
  const slot =
    jitterMs > 0 && !input.rerunOrManual
      ? (slotOfDue(
          input.taskName,
          due,
          jitterMs,
          slotsBetween(input.cron, timezone, due - jitterMs + 1, due, 10_000).slots.reverse(),
        ) ?? due)
      : due;
  // a re-run or a run-now is not a scheduled slot to decide about; its next run is the next slot
  const decision: CatchUpDecision = input.rerunOrManual
    ? { kind: "on-time", nextAfter: input.now.getTime() }
    : decideCatchUp({
        policy: policy.catchUp,
        storedSlot: slot,
        now: input.now.getTime(),
        // a run is due at its slot plus its jitter: lateness counts from there
        graceMs: input.graceMs + jitterMs,
        previousRunEndedAt: input.previousRunEndedAt?.getTime(),
        previousRunSlot: input.previousRunSlot?.getTime(),
        schedule: slotSource(input.cron, timezone),
      });
  const next = nextSlot(input.cron, timezone, decision.nextAfter);
  return {
    slot: new Date(slot),
    decision,
    nextRunAt: next === undefined ? undefined : new Date(dueAt(input.taskName, next, jitterMs)),
  };
}

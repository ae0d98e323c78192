import { parseDuration } from "../core/policies/catchUp.js";
import type { EntryProblem } from "./desiredState.js";

/**
 * The limit fields of a config entry (docs/isolation.md, "Limits from the config"): `timeout` (a
 * duration, "90s") and `memoryLimit` ("128MB", "1GB", or a whole number of MB). They may only lower
 * the bounds the task's registration sets in code; that comparison needs the registration, and is
 * made when the snapshot is applied (src/isolation/taskLimits.ts). Here: the form of each value.
 */

export interface LimitFields {
  timeoutMs?: number;
  memoryLimitMb?: number;
}

const MEMORY = /^(\d+)\s*(MB|GB)$/i;
/** The longest timeout a config entry may state (a run that needs longer needs no timeout). */
const MAX_TIMEOUT_MS = 7 * 86_400_000;

export function checkLimitFields(entry: Record<string, unknown>): {
  fields: LimitFields;
  problems: EntryProblem[];
} {
  const fields: LimitFields = {};
  const problems: EntryProblem[] = [];
  if (entry.timeout !== undefined) {
    const timeout = parseDuration(entry.timeout);
    if (!timeout.ok) problems.push({ field: "timeout", value: entry.timeout, reason: timeout.reason });
    else if (timeout.ms < 1 || timeout.ms > MAX_TIMEOUT_MS)
      problems.push({ field: "timeout", value: entry.timeout, reason: "must be from 1ms to 7d" });
    else fields.timeoutMs = timeout.ms;
  }
  if (entry.memoryLimit !== undefined) {
    const mb = memoryMb(entry.memoryLimit);
    if (mb === undefined)
      problems.push({
        field: "memoryLimit",
        value: entry.memoryLimit,
        reason: 'must be a size such as "128MB" or "1GB", or a whole number of MB',
      });
    else fields.memoryLimitMb = mb;
  }
  return { fields, problems };
}

function memoryMb(value: unknown): number | undefined {
  if (typeof value === "number") return Number.isSafeInteger(value) && value > 0 ? value : undefined;
  if (typeof value !== "string") return undefined;
  const match = MEMORY.exec(value.trim());
  if (!match) return undefined;
  const mb = Number(match[1]) * ((match[2] as string).toUpperCase() === "GB" ? 1024 : 1);
  return Number.isSafeInteger(mb) && mb > 0 ? mb : undefined;
}

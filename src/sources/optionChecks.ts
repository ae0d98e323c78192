import { CronwardenError } from "../core/errors.js";

/** A source option that must be a positive number of ms or bytes. */
export function positive(name: string, value: number): number {
  if (!Number.isFinite(value) || value <= 0) {
    throw new CronwardenError("INVALID_SETTINGS", `${name} must be a positive number, got ${value}`);
  }
  return value;
}

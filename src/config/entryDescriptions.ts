import type { RejectedEntry } from "./desiredState.js";

/**
 * How a config document's problems read in messages (src/config/desiredState.ts): each names the
 * entry, the field, the value (shortened) and the reason.
 */

/** Every problem of a rejected entry, one line each (`describeRejection` names the first). */
export function describeProblems(rejection: RejectedEntry): string[] {
  const who = rejection.name ? ` "${rejection.name}"` : "";
  return (rejection.problems ?? [rejection]).map(
    (problem) =>
      `config tasks[${rejection.index}]${who}: ${problem.field} ${formatValue(problem.value)} is invalid: ${problem.reason}`,
  );
}

/** `config tasks[3] "syncReport": cron "*\/61 * * * *" is invalid: minute field ...` */
export function describeRejection(rejection: RejectedEntry): string {
  const who = rejection.name ? ` "${rejection.name}"` : "";
  return `config tasks[${rejection.index}]${who}: ${rejection.field} ${formatValue(rejection.value)} is invalid: ${rejection.reason}`;
}

function formatValue(value: unknown): string {
  const text = JSON.stringify(value);
  return text === undefined ? "(missing)" : text.length > 120 ? `${text.slice(0, 117)}...` : text;
}

/** A name too long to be one is shown shortened (it is echoed in logs and responses). */
export function shortenName(
  value: unknown,
  path: readonly PropertyKey[],
  shortName: string | undefined,
): unknown {
  return path.length === 1 && path[0] === "name" && typeof value === "string" && value !== shortName
    ? shortName
    : value;
}

/** The entry's name, shortened when it is too long to be one (it is echoed in logs and responses). */
export function readableName(raw: unknown): string | undefined {
  const name = typeof raw === "object" && raw !== null ? (raw as Record<string, unknown>).name : undefined;
  if (typeof name !== "string") return undefined;
  return name.length > 200 ? `${name.slice(0, 60)}... (${name.length} characters)` : name;
}

export function valueAt(raw: unknown, path: readonly PropertyKey[]): unknown {
  let current: unknown = raw;
  for (const key of path) {
    if (typeof current !== "object" || current === null) return undefined;
    current = (current as Record<PropertyKey, unknown>)[key];
  }
  return current;
}

export function describeTopLevel(document: unknown): string {
  if (document === null || document === undefined || document === "") return "the document is empty";
  if (Array.isArray(document)) return "the document is a list";
  if (typeof document !== "object") return `the document is a ${typeof document}`;
  if (!("tasks" in document)) return 'it has no "tasks" key';
  return '"tasks" is not a list';
}

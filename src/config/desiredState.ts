import { z } from "zod";
import type { DependencyCondition, DependencySpec } from "../core/dependencies/spec.js";
import { CronwardenError } from "../core/errors.js";
import type { Calendar } from "../core/policies/calendar.js";
import type { CatchUpPolicy } from "../core/policies/catchUp.js";
import { formatDuration } from "../core/policies/catchUp.js";
import type { OverlapPolicy } from "../core/policies/overlap.js";
import { atSchedule, storedEvery } from "../core/policies/schedule.js";
import { TASK_NAME_PATTERN } from "../core/taskName.js";
import {
  checkExclude,
  type ParsedCalendars,
  parseCalendars,
  type ReadCalendarFile,
  readCalendarFile,
} from "./calendarConfig.js";
import { type CronRules, checkSchedule } from "./cronValidator.js";
import {
  applyDependencies,
  DEPENDENCY_FIELDS,
  type EntryDependency,
  readDependency,
} from "./dependencyEntries.js";
import { describeTopLevel, readableName, shortenName, valueAt } from "./entryDescriptions.js";
import type { EntryMemo, EntryRead } from "./entryMemo.js";
import { checkLimitFields } from "./limitConfig.js";
import { checkPolicyFields } from "./policyConfig.js";
import { checkShardFields, type ShardFields } from "./shardConfig.js";

export { describeProblems, describeRejection } from "./entryDescriptions.js";

/** One task's entry in the desired state, after validation (`shards`: docs/sharding.md). */
export interface DesiredTask extends ShardFields {
  name: string;
  enabled: boolean;
  cron: string;
  /** Always set: the entry's own timezone or the service default. */
  timezone: string;
  /**
   * For an `every:` entry, its interval as written ("15m"); `cron` then holds it as stored in the
   * job row ("15 minutes", src/core/policies/schedule.ts).
   */
  every?: string;
  /**
   * For an `at:` one-shot, its time (ISO); `cron` then names it `at <ISO time>`, and the job row
   * has no repeat interval (src/core/policies/schedule.ts atSchedule).
   */
  at?: string;
  /** What becomes of slots that fall due while a run is going (docs/behaviour.md); absent: skip. */
  overlap?: OverlapPolicy;
  /** A stable per-slot start delay in [0, jitterMs) (docs/behaviour.md, "Jitter"); absent: none. */
  jitterMs?: number;
  /** What runs of the slots missed while nothing ran (docs/behaviour.md); absent: the default. */
  catchUp?: CatchUpPolicy;
  /** Pause after this many failed slots in a row (docs/behaviour.md, "Pause on failure"); absent: never. */
  pauseOnFailure?: number;
  /** A lower timeout than the registration's (docs/isolation.md, "Limits from the config"). */
  timeoutMs?: number;
  /** A lower heap limit than the registration's, for an isolated task. */
  memoryLimitMb?: number;
  /**
   * Set for a task that runs after others (docs/dependencies.md): it has no cron of its own, and
   * `cron`/`timezone` are its upstreams' shared schedule (the slots it runs for).
   */
  after?: DependencySpec;
  /** The calendars its `exclude` names, compiled (docs/calendars.md); absent: none. */
  exclude?: Calendar[];
}

/** An entry of a snapshot that was refused, with the reason; the task keeps its previous state. */
export interface RejectedEntry {
  /** Position in the snapshot's `tasks` list. */
  index: number;
  /** The entry's name when it had a readable one. */
  name: string | undefined;
  field: string;
  value: unknown;
  reason: string;
  /** Every problem of the entry when it has several (the first is also in field/value/reason). */
  problems?: EntryProblem[];
}

export interface EntryProblem {
  field: string;
  value: unknown;
  reason: string;
}

/** A validated snapshot of the desired state. Only `parseDesiredState` creates one. */
export interface DesiredState {
  tasks: DesiredTask[];
  rejected: RejectedEntry[];
  /** Where it came from (file path, URL) and its revision (content hash, etag). */
  source: string;
  revision: string;
  /** The document as read, kept as the durable last-known desired state once applied. */
  document: unknown;
  /** The document says `confirmDisableAll: true`: it may disable every task (src/config/fleetGuard.ts). */
  confirmDisableAll: boolean;
}

/**
 * The boundary where raw config becomes a DesiredState the rest of the code trusts.
 * A document without a readable `tasks` list is refused whole (the last valid snapshot stays);
 * an invalid entry is refused alone and the others are applied.
 */

const documentSchema = z.object(
  {
    tasks: z.array(z.unknown()),
    confirmDisableAll: z.boolean().optional(),
    calendars: z.unknown().optional(), // checked by parseCalendars (src/config/calendarConfig.ts)
  },
  { error: "expected an object" },
);

const entrySchema = z.strictObject({
  name: z
    .string({ error: "must be a string" })
    .regex(
      TASK_NAME_PATTERN,
      "must be 1-200 ASCII letters (A-Z, a-z), digits, '.', '_', '-' or ':', starting with a letter or digit",
    ),
  enabled: z.boolean({ error: "must be true or false" }),
  cron: z.string({ error: "must be a string" }).min(1, "must not be empty").optional(),
  timezone: z.string({ error: "must be a string" }).optional(),
  // checked by checkPolicyFields (src/config/policyConfig.ts)
  every: z.unknown().optional(),
  at: z.unknown().optional(),
  catchUp: z.unknown().optional(),
  overlap: z.unknown().optional(),
  jitter: z.unknown().optional(),
  pauseOnFailure: z.unknown().optional(),
  exclude: z.unknown().optional(),
  // checked by checkLimitFields (src/config/limitConfig.ts)
  timeout: z.unknown().optional(),
  memoryLimit: z.unknown().optional(),
  shards: z.unknown().optional(), // checked by checkShardFields (src/config/shardConfig.ts)
  shardParameters: z.unknown().optional(),
  ...DEPENDENCY_FIELDS,
});

export interface ParseOptions {
  defaultTimezone: string;
  rules: CronRules;
  now: Date;
  source: string;
  revision: string;
  /** Reads an `ics:` calendar's file; default: from the file system (src/config/calendarConfig.ts). */
  readCalendarFile?: ReadCalendarFile;
  /** The previous document's valid entries, reused where equal (a ConfigWatcher's; src/config/entryMemo.ts). */
  memo?: EntryMemo;
}

export function parseDesiredState(document: unknown, options: ParseOptions): DesiredState {
  const top = documentSchema.safeParse(document);
  if (!top.success) {
    throw new CronwardenError(
      "INVALID_CONFIG",
      `config from ${options.source} is not a desired-state document: ${describeTopLevel(document)}; expected { "tasks": [ { "name", "enabled", "cron", "timezone"?, "catchUp"? } ] }`,
    );
  }

  if (top.data.tasks.length === 0 && top.data.confirmDisableAll !== true) {
    // a source that answers with an empty list by mistake would otherwise disable every task
    throw new CronwardenError(
      "INVALID_CONFIG",
      `config from ${options.source} has an empty "tasks" list, which would disable every task; if that is meant, add "confirmDisableAll": true to the document`,
    );
  }
  const tasks: DesiredTask[] = [];
  const rejected: RejectedEntry[] = [];
  const indexesByName = new Map<string, number[]>();
  const dependencies = new Map<number, EntryDependency>();
  const calendars = parseCalendars(top.data.calendars, options.readCalendarFile ?? readCalendarFile);

  const memo = options.memo?.begin(options.defaultTimezone, options.rules);
  top.data.tasks.forEach((raw, index) => {
    let read = memo?.reuse(index, raw);
    if (read) memo?.keepReused(index, raw, read);
    else {
      const name = readableName(raw);
      const entry = entrySchema.safeParse(raw);
      if (!entry.success) {
        rejected.push(invalidEntry(raw, index, name, entry.error.issues, options, calendars));
        return;
      }
      const checked = readEntry(entry.data, index, name, options, calendars);
      if ("rejected" in checked) {
        rejected.push(checked.rejected);
        return;
      }
      read = checked;
      memo?.keep(index, raw, read, options.rules, options.defaultTimezone);
    }
    const indexes = indexesByName.get(read.task.name);
    if (indexes) indexes.push(index);
    else indexesByName.set(read.task.name, [index]);
    tasks.push(read.task);
    if (read.after) dependencies.set(index, read.after);
  });
  memo?.end();

  const duplicates = rejectDuplicates(indexesByName, rejected);
  const accepted = applyDependencies(
    tasks.filter((task) => !duplicates.has(task.name)),
    indexesByName,
    dependencies,
    rejected,
  );
  rejected.sort((a, b) => a.index - b.index);

  return {
    tasks: accepted,
    rejected,
    source: options.source,
    revision: options.revision,
    document,
    confirmDisableAll: top.data.confirmDisableAll === true,
  };
}

function excludeOf(
  fields: Record<string, unknown>,
  calendars: ParsedCalendars,
): ReturnType<typeof checkExclude> {
  return checkExclude(fields.exclude, calendars, fields.after !== undefined);
}

/** An entry that failed the schema: every problem of it, so that one round of fixes is enough. */
function invalidEntry(
  raw: unknown,
  index: number,
  name: string | undefined,
  issues: readonly z.core.$ZodIssue[],
  options: ParseOptions,
  calendars: ParsedCalendars,
): RejectedEntry {
  const problems: EntryProblem[] = issues.map((issue) => ({
    field: issue.path.join(".") || "(entry)",
    value: shortenName(issue.path.length ? valueAt(raw, issue.path) : raw, issue.path, name),
    reason: issue.code === "unrecognized_keys" ? `unknown key(s) ${issue.keys.join(", ")}` : issue.message,
  }));
  if (typeof raw === "object" && raw !== null && !Array.isArray(raw)) {
    const fields = raw as Record<string, unknown>;
    for (const problem of [
      ...checkPolicyFields(fields, options.rules).problems,
      ...checkLimitFields(fields).problems,
      ...checkShardFields(fields).problems,
    ])
      if (!problems.some((known) => known.field === problem.field)) problems.push(problem);
    for (const problem of looseDependency(fields))
      if (!problems.some((known) => known.field === problem.field)) problems.push(problem);
    for (const problem of excludeOf(fields, calendars).problems)
      if (!problems.some((known) => known.field === problem.field)) problems.push(problem);
  }
  const rawCron = valueAt(raw, ["cron"]);
  const rawTimezone = valueAt(raw, ["timezone"]);
  if (
    typeof rawCron === "string" &&
    rawCron !== "" &&
    !problems.some((problem) => problem.field === "cron")
  ) {
    const timezone = typeof rawTimezone === "string" ? rawTimezone : options.defaultTimezone;
    const check = checkSchedule(rawCron, timezone, options.rules, options.now);
    if (!check.ok) problems.push({ field: check.field, value: check.value, reason: check.reason });
  }
  const [first] = problems;
  return {
    index,
    name,
    field: first?.field ?? "entry",
    value: first ? first.value : raw,
    reason: first?.reason ?? "invalid",
    problems,
  };
}

/** A valid entry's task (and its upstreams), or why it is rejected: its schedule, policies and dependency checked together. */
function readEntry(
  data: z.output<typeof entrySchema>,
  index: number,
  name: string | undefined,
  options: ParseOptions,
  calendars: ParsedCalendars,
): EntryRead | { rejected: RejectedEntry } {
  const dependency = readDependency(data);
  const policy = checkPolicyFields(data, options.rules);
  const limits = checkLimitFields(data);
  const shards = checkShardFields(data);
  const timezone = data.timezone ?? options.defaultTimezone;
  const check =
    data.cron === undefined ? undefined : checkSchedule(data.cron, timezone, options.rules, options.now);
  // every problem of the entry, so that one round of fixes is enough; a dependency problem first
  // (the policy check's "a schedule is required" says the same as its own, with less)
  const problems = policy.problems.filter(
    (problem) => dependency.ok || !dependency.problems.some((known) => known.field === problem.field),
  );
  if (check && !check.ok) problems.unshift({ field: check.field, value: check.value, reason: check.reason });
  problems.push(...limits.problems, ...shards.problems);
  if (!dependency.ok) problems.unshift(...dependency.problems);
  const exclude = excludeOf(data, calendars);
  problems.push(...exclude.problems);
  const schedule = entrySchedule(
    check,
    policy.fields,
    dependency.ok && dependency.spec !== undefined,
    timezone,
  );
  // a jitter as long as the gap between two slots would let one slot's run start after the next one's
  const shortestGapMs = check?.ok ? check.shortestGapMs : policy.fields.every;
  if (
    policy.fields.jitterMs !== undefined &&
    shortestGapMs !== undefined &&
    policy.fields.jitterMs >= shortestGapMs
  )
    problems.push({
      field: "jitter",
      value: data.jitter,
      reason: `must be shorter than the schedule's shortest gap between two runs (${formatDuration(shortestGapMs)})`,
    });
  if (problems.length > 0 || !schedule) {
    const [first] = problems;
    return {
      rejected: {
        index,
        name,
        field: first?.field ?? "cron",
        value: first?.value,
        reason: first?.reason ?? "invalid",
        ...(problems.length > 1 ? { problems } : {}),
      },
    };
  }
  return {
    task: {
      name: data.name,
      enabled: data.enabled,
      ...schedule,
      ...(policy.fields.jitterMs ? { jitterMs: policy.fields.jitterMs } : {}),
      ...(policy.fields.overlap ? { overlap: policy.fields.overlap } : {}),
      ...(policy.fields.catchUp ? { catchUp: policy.fields.catchUp } : {}),
      ...(policy.fields.pauseOnFailure ? { pauseOnFailure: policy.fields.pauseOnFailure } : {}),
      ...(exclude.calendars ? { exclude: exclude.calendars } : {}),
      ...limits.fields,
      ...shards.fields,
    },
    ...(dependency.ok && dependency.spec ? { after: dependency.spec } : {}),
  };
}

/** The entry's schedule: cron, `every`, `at`, or none of its own for a downstream (its upstreams' is filled in later). */
function entrySchedule(
  check: ReturnType<typeof checkSchedule> | undefined,
  fields: ReturnType<typeof checkPolicyFields>["fields"],
  downstream: boolean,
  timezone: string,
): Pick<DesiredTask, "cron" | "timezone" | "every" | "at"> | undefined {
  if (check?.ok) return { cron: check.cron, timezone: check.timezone };
  if (fields.every !== undefined)
    return { cron: storedEvery(fields.every), timezone, every: formatDuration(fields.every) };
  if (fields.at !== undefined)
    return { cron: atSchedule(fields.at), timezone, at: new Date(fields.at).toISOString() };
  return downstream ? { cron: "", timezone } : undefined;
}

/** Every entry of a name that appears more than once is rejected; returns those names. */
function rejectDuplicates(
  indexesByName: ReadonlyMap<string, number[]>,
  rejected: RejectedEntry[],
): Set<string> {
  const duplicates = new Set(
    [...indexesByName].filter(([, indexes]) => indexes.length > 1).map(([name]) => name),
  );
  for (const name of duplicates) {
    const indexes = indexesByName.get(name) ?? [];
    for (const index of indexes) {
      rejected.push({
        index,
        name,
        field: "name",
        value: name,
        reason: `appears ${indexes.length} times (tasks[${indexes.join("], tasks[")}]); keep exactly one entry per task`,
      });
    }
  }
  return duplicates;
}

/**
 * The dependency fields' problems of an entry that failed the schema (a `when` without `after`, a bad
 * `waitAtMost`), read from the raw entry where its fields have the right types.
 */
function looseDependency(fields: Record<string, unknown>): EntryProblem[] {
  const text = (value: unknown) => (typeof value === "string" ? value : undefined);
  const after = fields.after;
  if (after !== undefined && !(Array.isArray(after) && after.every((name) => typeof name === "string")))
    return [];
  const check = readDependency({
    cron: text(fields.cron),
    every: fields.every,
    at: fields.at,
    timezone: text(fields.timezone),
    after: after as string[] | undefined,
    when: fields.when as DependencyCondition | undefined,
    waitAtMost: text(fields.waitAtMost),
  });
  return check.ok ? [] : check.problems;
}

/**
 * The desired-state documents the chaos run writes to the shared watched file: valid edits
 * (re-timings, enable/disable) of a state it keeps, and hostile documents that a correct service
 * refuses as a whole or entry by entry without changing any task (and without dying).
 */
import { createHash } from "node:crypto";
import { rename, writeFile } from "node:fs/promises";
import YAML from "yaml";
import type { Random } from "./random.js";
import { SHARD_COUNT, SHARDED_TASK, taskNameOf } from "./spec.js";

export interface TaskState {
  name: string;
  enabled: boolean;
  cron: string;
  /** The sharded task's static shards (docs/sharding.md). */
  shards?: number;
}

/** 6-field crons firing every 5, 6 or 10 s at a fixed offset: every gap is the step (60 is a multiple of it). */
export function cronPool(): string[] {
  const crons: string[] = [];
  for (const step of [5, 6, 10])
    for (let offset = 0; offset < step; offset++) crons.push(`${offset}/${step} * * * * *`);
  return crons;
}

/** The tasks, then the sharded task (every 10 s, SHARD_COUNT shards, a reduce: chaos/instance.ts). */
export function initialState(taskCount: number, random: Random): TaskState[] {
  const crons = cronPool();
  const tasks: TaskState[] = Array.from({ length: taskCount }, (_, index) => ({
    name: taskNameOf(index),
    enabled: true,
    cron: random.pick(crons),
  }));
  tasks.push({ name: SHARDED_TASK, enabled: true, cron: "0/10 * * * * *", shards: SHARD_COUNT });
  return tasks;
}

export function renderValid(state: TaskState[]): string {
  return YAML.stringify({
    tasks: state.map(({ name, enabled, cron, shards }) => ({
      name,
      enabled,
      cron,
      ...(shards === undefined ? {} : { shards }),
    })),
  });
}

/** A valid edit of `state` (in place); returns what it did, for the event log. */
export function editState(state: TaskState[], random: Random): string {
  const crons = cronPool();
  const disabled = state.filter((task) => !task.enabled).length;
  if (random.chance(0.5)) {
    const count = random.int(3, 20);
    for (let index = 0; index < count; index++) random.pick(state).cron = random.pick(crons);
    return `re-timed ${count} tasks`;
  }
  // enable/disable; at most a quarter of the fleet disabled at a time
  const count = random.int(2, 15);
  let flipped = 0;
  for (let index = 0; index < count; index++) {
    const task = random.pick(state);
    if (task.enabled && disabled + flipped >= state.length / 4) continue;
    task.enabled = !task.enabled;
    flipped += task.enabled ? -1 : 1;
  }
  return `toggled up to ${count} tasks (${state.filter((task) => !task.enabled).length} disabled now)`;
}

export const HOSTILE_KINDS = [
  "deep-yaml",
  "deep-json",
  "random-bytes",
  "nul-bytes",
  "wrong-types",
  "huge",
  "over-limit",
  "proto-keys",
  "fleet-typo",
] as const;
export type HostileKind = (typeof HOSTILE_KINDS)[number];

/**
 * A hostile document. Every kind must leave every task as it was: unreadable or structurally
 * wrong documents are ignored whole, wrong entries are refused one by one (a refused entry is
 * not a missing one), `__proto__`/`constructor` keys change nothing, and a document whose only
 * entry misspells a task would disable the whole fleet (the fleet guard refuses it).
 */
export function renderHostile(kind: HostileKind, state: TaskState[], random: Random): string | Buffer {
  switch (kind) {
    case "deep-yaml": {
      const depth = random.int(500, 1400); // about depth²/2 bytes: under the 1 MiB limit
      return `tasks:\n${Array.from({ length: depth }, (_, index) => `${" ".repeat(index + 2)}- `).join("\n")}x\n`;
    }
    case "deep-json": {
      const depth = random.int(1000, 20000);
      return `{"tasks": ${"[".repeat(depth)}${"]".repeat(depth)}}`;
    }
    case "random-bytes":
      return Buffer.from(Array.from({ length: random.int(1, 4096) }, () => random.int(0, 255)));
    case "nul-bytes": {
      // before the document or after it: inside an entry, a NUL makes a name that is simply not the task's
      // (that task is then missing from the document, a change like any typo)
      const text = renderValid(state);
      return random.chance(0.5) ? `\0\0${text}` : `${text}\0\0\n`;
    }
    case "wrong-types":
      return random.pick([
        () => "tasks: all\n",
        () => "tasks: 42\n",
        () => YAML.stringify({ tasks: { [state[0]?.name ?? "x"]: true } }),
        () =>
          YAML.stringify({
            tasks: state.map((task) => ({ name: task.name, enabled: "yes", cron: random.int(0, 1e9) })),
          }),
        () => YAML.stringify({ tasks: state.map((task) => ({ ...task, timezone: ["UTC"] })) }),
        () => `${renderValid(state)}\n# a number too big for anything\nextra: ${"9".repeat(400)}\n`,
      ])();
    case "huge": {
      // under the 1 MiB limit: the valid tasks plus one entry with a 400-800 KB name
      const name = "n".repeat(random.int(400_000, 800_000));
      return YAML.stringify({ tasks: [...state, { name, enabled: true, cron: "*/5 * * * * *" }] });
    }
    case "over-limit":
      return `${renderValid(state)}\n# ${"x".repeat(1_200_000)}\n`;
    case "proto-keys":
      return JSON.stringify({
        tasks: state,
        ["__proto__"]: { enabled: false, polluted: true },
        constructor: { prototype: { enabled: false } },
      }).replace('"tasks"', '"__proto__": {"tasks": []}, "tasks"');
    case "fleet-typo": {
      const task = random.pick(state);
      return YAML.stringify({
        tasks: [{ name: task.name.toUpperCase(), enabled: true, cron: task.cron }],
      });
    }
  }
}

/** The revision the file source gives a document (sha256 of its text, 16 hex digits): maps audit rows to documents. */
export function revisionOf(content: string | Buffer): string {
  const text = typeof content === "string" ? content : content.toString("utf8");
  return createHash("sha256").update(text).digest("hex").slice(0, 16);
}

/** Replaces the file atomically (write, then rename), as editors and config-map mounts do. */
export async function writeDocument(file: string, content: string | Buffer): Promise<void> {
  await writeFile(`${file}.tmp`, content);
  await rename(`${file}.tmp`, file);
}

import type { IEvent, IRangeResponse } from "etcd3";
import { CronwardenError } from "../core/errors.js";
import { toError } from "../core/logger.js";
import type { ConfigDocument } from "./configSource.js";
import { ANY_FORMAT, parseDocument } from "./parseDocument.js";

/** Which keys hold the desired state: one key with the whole document, or one key per task under a prefix. */
export type EtcdSelection = { key: string; prefix?: undefined } | { prefix: string; key?: undefined };

export interface EtcdEntry {
  value: Buffer;
  modRevision: bigint;
}

/** The selected keys' values as of store revision `revision` (every change up to it is included). */
export interface EtcdSnapshot {
  entries: Map<string, EtcdEntry>;
  revision: bigint;
}

export function snapshotFromRange(response: IRangeResponse): EtcdSnapshot {
  const entries = new Map<string, EtcdEntry>();
  for (const kv of response.kvs) {
    entries.set(kv.key.toString("utf8"), { value: kv.value, modRevision: BigInt(kv.mod_revision) });
  }
  return { entries, revision: BigInt(response.header.revision) };
}

export function copySnapshot(snapshot: EtcdSnapshot): EtcdSnapshot {
  return { entries: new Map(snapshot.entries), revision: snapshot.revision };
}

/** Applies a watch response's events; the snapshot is then current at the last event's revision. */
export function applyEvents(snapshot: EtcdSnapshot, events: readonly IEvent[]): void {
  for (const { type, kv } of events) {
    const key = kv.key.toString("utf8");
    const modRevision = BigInt(kv.mod_revision);
    if (type === "Put") snapshot.entries.set(key, { value: kv.value, modRevision });
    else snapshot.entries.delete(key);
    if (modRevision > snapshot.revision) snapshot.revision = modRevision;
  }
}

/**
 * The desired-state document a snapshot holds. Key mode: the key's value is the document, its
 * revision the key's mod revision. Prefix mode: `{ tasks: [...] }` with one entry per key in key
 * order, each the key's value (a mapping) with `name` taken from the key when absent; its revision
 * is the snapshot's store revision, which also moves when a key is deleted. Throws a
 * CronwardenError naming `source` and the key.
 */
export function assembleDocument(
  snapshot: EtcdSnapshot,
  selection: EtcdSelection,
  { source, maxBytes }: { source: string; maxBytes: number },
): ConfigDocument {
  const fail = (code: "CONFIG_UNREADABLE" | "INVALID_CONFIG", detail: string, cause?: unknown) =>
    new CronwardenError(code, `config ${source}: ${detail}`, cause === undefined ? undefined : { cause });
  const read = (key: string, entry: EtcdEntry): unknown => {
    let text: string;
    try {
      text = new TextDecoder("utf-8", { fatal: true }).decode(entry.value);
    } catch {
      throw fail("INVALID_CONFIG", `value of key ${key} is not valid UTF-8`);
    }
    if (text.trim() === "") throw fail("INVALID_CONFIG", `key ${key} is empty; expected JSON or YAML`);
    try {
      return parseDocument(text, ANY_FORMAT);
    } catch (thrown) {
      const reason = toError(thrown).message;
      throw fail("INVALID_CONFIG", `value of key ${key} cannot be parsed (${reason})`, thrown);
    }
  };

  const entries = [...snapshot.entries].sort(([a], [b]) => Buffer.compare(Buffer.from(a), Buffer.from(b)));
  const size = entries.reduce((sum, [, entry]) => sum + entry.value.byteLength, 0);
  if (size > maxBytes) {
    const what =
      selection.key !== undefined
        ? `value of key ${selection.key} is`
        : `values of the keys under prefix ${selection.prefix} total`;
    throw fail("CONFIG_UNREADABLE", `${what} ${size} bytes, over the limit of ${maxBytes} (maxBytes)`);
  }

  if (selection.key !== undefined) {
    const entry = snapshot.entries.get(selection.key);
    if (!entry) {
      throw fail(
        "CONFIG_UNREADABLE",
        `key ${selection.key} does not exist (at revision ${snapshot.revision}); put the desired-state document there`,
      );
    }
    return { content: read(selection.key, entry), revision: entry.modRevision.toString() };
  }

  if (entries.length === 0) {
    throw fail(
      "CONFIG_UNREADABLE",
      `no keys under prefix ${selection.prefix} (at revision ${snapshot.revision}); put one key per task, ${selection.prefix}<taskName>, or check the prefix and namespace (to stop a task, set enabled: false rather than deleting every key)`,
    );
  }
  const tasks = entries.map(([key, entry]) => {
    const name = key.slice(selection.prefix.length);
    const value = read(key, entry);
    if (typeof value !== "object" || value === null || Array.isArray(value)) {
      throw fail(
        "INVALID_CONFIG",
        `value of key ${key} is not a mapping ({ enabled, cron, timezone? }): got ${Array.isArray(value) ? "a list" : value === null ? "null" : `a ${typeof value}`}`,
      );
    }
    const named = (value as { name?: unknown }).name;
    if (named !== undefined && named !== name) {
      throw fail(
        "INVALID_CONFIG",
        `value of key ${key} names task ${JSON.stringify(named)} but the key names ${JSON.stringify(name)}; drop name or make them agree`,
      );
    }
    return { name, ...value };
  });
  return { content: { tasks }, revision: snapshot.revision.toString() };
}

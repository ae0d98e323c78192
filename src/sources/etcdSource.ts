import { setTimeout as delay } from "node:timers/promises";
import type { Etcd3, IWatchResponse, Watcher } from "etcd3";
import { formatDelay, retryDelay, sleep } from "../core/backoff.js";
import { CronwardenError, type CronwardenErrorCode } from "../core/errors.js";
import { toError } from "../core/logger.js";
import { maskSecrets } from "../observability/redact.js";
import type { ConfigDocument, ConfigListener, ConfigSource } from "./configSource.js";
import {
  applyEvents,
  assembleDocument,
  copySnapshot,
  type EtcdSelection,
  type EtcdSnapshot,
  snapshotFromRange,
} from "./etcdDocument.js";
import { applyNamespace } from "./namespace.js";
import { notifyError, notifyNext } from "./notify.js";
import { positive } from "./optionChecks.js";

export interface EtcdSourceOptions {
  /** etcd client URLs, e.g. `["http://etcd-0:2379", "http://etcd-1:2379"]` (any https one turns TLS on). */
  endpoints: string[];
  /** One key whose value is the whole document (JSON or YAML). Exactly one of key and prefix. */
  key?: string;
  /** One key per task, `<prefix><taskName>`, whose value is that task's entry (JSON or YAML mapping). */
  prefix?: string;
  /** The environment (dev, staging, prod...) filled into the key's or prefix's `{namespace}` placeholder. */
  namespace?: string;
  auth?: { username: string; password: string };
  /** The selected values together must not exceed this. Default 1 MiB. */
  maxBytes?: number;
  /** Per read (and per connection attempt). Default 5 s. */
  timeoutMs?: number;
}

const DEFAULT_MAX_BYTES = 1024 * 1024;
const DEFAULT_TIMEOUT_MS = 5_000;
/** Between attempts to read or re-watch while etcd is unreachable (±25% jitter). */
const RECONNECT = { initialMs: 250, maxMs: 10_000 };
/** How long unsubscribe waits for etcd to acknowledge the watch's cancellation. */
const CANCEL_WAIT_MS = 2_000;

type WatchEnd = { kind: "closed" } | { kind: "disconnected" | "canceled"; error: Error; received: boolean };

/**
 * The desired state in etcd v3: one key holding the document, or one key per task under a prefix.
 * `load()` reads at the current revision; a subscription watches from the revision after the last
 * one read. After a disconnect it resumes the watch from the last revision it saw, so no change is
 * missed; if etcd compacted that revision away, it reports so, reads the full state again, delivers
 * it, and watches from there.
 */
export class EtcdConfigSource implements ConfigSource {
  readonly description: string;
  readonly endpoints: readonly string[];
  readonly #selection: EtcdSelection;
  readonly #auth: { username: string; password: string } | undefined;
  readonly #maxBytes: number;
  readonly #timeoutMs: number;
  /** The last load(): a subscription starts from it, so it delivers only what changed since. */
  #loaded: EtcdSnapshot | undefined;

  constructor(options: EtcdSourceOptions) {
    if (!Array.isArray(options.endpoints) || options.endpoints.length === 0) {
      throw new CronwardenError("INVALID_SETTINGS", "etcd endpoints must list at least one client URL");
    }
    for (const endpoint of options.endpoints) {
      if (!/^https?:\/\/[^/\s@]+$/.test(endpoint)) {
        throw new CronwardenError(
          "INVALID_SETTINGS",
          `etcd endpoint ${JSON.stringify(endpoint)} must look like http://host:2379 or https://host:2379`,
        );
      }
    }
    if ((options.key === undefined) === (options.prefix === undefined)) {
      throw new CronwardenError("INVALID_SETTINGS", "etcd source needs exactly one of key and prefix");
    }
    if (options.key !== undefined) {
      this.#selection = { key: nonEmpty("key", applyNamespace(options.key, options.namespace, "key")) };
    } else {
      const prefix = applyNamespace(options.prefix ?? "", options.namespace, "prefix");
      this.#selection = { prefix: nonEmpty("prefix", prefix) };
    }
    this.endpoints = [...options.endpoints];
    this.#auth = options.auth;
    this.#maxBytes = positive("maxBytes", options.maxBytes ?? DEFAULT_MAX_BYTES);
    this.#timeoutMs = positive("timeoutMs", options.timeoutMs ?? DEFAULT_TIMEOUT_MS);
    const selected =
      this.#selection.key !== undefined ? `key ${this.#selection.key}` : `prefix ${this.#selection.prefix}`;
    this.description = `etcd ${this.endpoints.join(",")} ${selected}`;
  }

  async load(): Promise<ConfigDocument> {
    const client = await this.#connect();
    try {
      const snapshot = await this.#read(client);
      this.#loaded = snapshot;
      return this.#assemble(snapshot);
    } finally {
      client.close();
    }
  }

  subscribe(listener: ConfigListener): () => Promise<void> {
    const closing = new AbortController();
    const following = this.#follow(listener, closing.signal);
    return async () => {
      closing.abort();
      await following;
    };
  }

  /** The subscription's loop, on its own client: never throws; ends when `signal` aborts. */
  async #follow(listener: ConfigListener, signal: AbortSignal): Promise<void> {
    let client: Etcd3;
    try {
      client = await this.#connect();
    } catch (thrown) {
      const detail = `cannot create an etcd client (${etcdMessage(thrown)}); not watching`;
      notifyError(listener, this.#error("CONFIG_UNREADABLE", detail, thrown));
      return;
    }
    let snapshot = this.#loaded && copySnapshot(this.#loaded);
    let failures = 0;
    try {
      while (!signal.aborted) {
        let waitMs: number;
        try {
          if (!snapshot) {
            snapshot = await this.#read(client);
            this.#deliver(listener, snapshot);
          }
          const end = await this.#watch(client, snapshot, listener, signal);
          if (end.kind === "closed") break;
          const from = snapshot.revision + 1n;
          if (end.kind === "disconnected") {
            failures = end.received ? 1 : failures + 1;
            waitMs = retryDelay(failures, RECONNECT);
            const detail = `watch lost its connection (${etcdMessage(end.error)}); resuming from revision ${from} in ${formatDelay(waitMs)}`;
            notifyError(listener, this.#error("CONFIG_UNREADABLE", detail, end.error));
          } else if (await this.#isCompacted(client, from)) {
            // etcd answered just now: read the full state at once
            snapshot = undefined;
            failures = 0;
            waitMs = 0;
            const detail = `etcd compacted its history past revision ${from}, where the watch was to resume; changes in between are lost, so the full state is read again now`;
            notifyError(listener, this.#error("CONFIG_UNREADABLE", detail, end.error));
          } else {
            snapshot = undefined;
            failures += 1;
            waitMs = retryDelay(failures, RECONNECT);
            const detail = `etcd canceled the watch (${etcdMessage(end.error)}); reading the full state again in ${formatDelay(waitMs)}`;
            notifyError(listener, this.#error("CONFIG_UNREADABLE", detail, end.error));
          }
        } catch (thrown) {
          if (signal.aborted) break;
          failures += 1;
          waitMs = retryDelay(failures, RECONNECT);
          const error = toError(thrown);
          const code = error instanceof CronwardenError ? error.code : "CONFIG_UNREADABLE";
          notifyError(
            listener,
            new CronwardenError(code, `${error.message}; retrying in ${formatDelay(waitMs)}`),
          );
        }
        await sleep(waitMs, signal);
      }
    } finally {
      client.close();
    }
  }

  /**
   * Watches from the revision after `snapshot`'s, applying each change to it and delivering the
   * document, until the watch breaks or `signal` aborts. The watcher is then cancelled: the etcd3
   * client would re-attach it by itself, from the revision of its last "created" response, which
   * can be ahead of the events actually received.
   */
  #watch(client: Etcd3, snapshot: EtcdSnapshot, listener: ConfigListener, signal: AbortSignal) {
    return new Promise<WatchEnd>((resolve) => {
      const builder = client.watch();
      const scoped =
        this.#selection.key !== undefined
          ? builder.key(this.#selection.key)
          : builder.prefix(this.#selection.prefix);
      // watcher(), not create(): create() settles only once connected, so a watch that cannot
      // connect would neither be reported nor be cancellable.
      const watcher = scoped.startRevision((snapshot.revision + 1n).toString()).watcher();
      let received = false;
      let settled = false;
      const finish = (end: WatchEnd, cancel: boolean) => {
        if (settled) return;
        settled = true;
        signal.removeEventListener("abort", onAbort);
        void (cancel ? cancelWithin(watcher, CANCEL_WAIT_MS) : Promise.resolve()).then(() => resolve(end));
      };
      const onAbort = () => finish({ kind: "closed" }, true);
      signal.addEventListener("abort", onAbort, { once: true });
      watcher.on("data", (response: IWatchResponse) => {
        if (settled) return;
        received = true;
        try {
          if (response.events.length === 0) {
            // a progress notification: every change up to this revision has been sent
            const progress = BigInt(response.header.revision);
            if (progress > snapshot.revision) snapshot.revision = progress;
            return;
          }
          applyEvents(snapshot, response.events);
          this.#deliver(listener, snapshot);
        } catch (thrown) {
          notifyError(
            listener,
            this.#error("CONFIG_UNREADABLE", "a watch response could not be applied", thrown),
          );
        }
      });
      watcher.on("disconnected", (error: unknown) =>
        finish({ kind: "disconnected", error: toError(error), received }, true),
      );
      // etcd ended the watch (a compacted start revision, lost permissions): it is already detached
      watcher.on("error", (error: unknown) =>
        finish({ kind: "canceled", error: toError(error), received }, false),
      );
      if (signal.aborted) onAbort();
    });
  }

  async #read(client: Etcd3): Promise<EtcdSnapshot> {
    try {
      const response =
        this.#selection.key !== undefined
          ? await client.get(this.#selection.key).exec()
          : await client.getAll().prefix(this.#selection.prefix).exec();
      return snapshotFromRange(response);
    } catch (thrown) {
      const detail = `cannot be read (${etcdMessage(thrown)}); check that etcd is running and reachable at ${this.endpoints.join(", ")}`;
      throw this.#error("CONFIG_UNREADABLE", detail, thrown);
    }
  }

  /** Whether etcd no longer has `revision` (compacted), or undefined if it cannot tell. */
  async #isCompacted(client: Etcd3, revision: bigint): Promise<boolean | undefined> {
    try {
      const at = revision.toString();
      if (this.#selection.key !== undefined) await client.get(this.#selection.key).revision(at).exec();
      else await client.getAll().prefix(this.#selection.prefix).revision(at).count();
      return false;
    } catch (thrown) {
      return toError(thrown).message.includes("compacted") ? true : undefined;
    }
  }

  #assemble(snapshot: EtcdSnapshot): ConfigDocument {
    return assembleDocument(snapshot, this.#selection, {
      source: this.description,
      maxBytes: this.#maxBytes,
    });
  }

  #deliver(listener: ConfigListener, snapshot: EtcdSnapshot): void {
    let document: ConfigDocument;
    try {
      document = this.#assemble(snapshot);
    } catch (thrown) {
      notifyError(listener, toError(thrown));
      return;
    }
    notifyNext(listener, document);
  }

  /** etcd3 (gRPC, protobufjs: about 27 MB) is loaded only by processes that use etcd. */
  async #connect(): Promise<Etcd3> {
    let Etcd3: typeof import("etcd3").Etcd3;
    try {
      ({ Etcd3 } = await import("etcd3"));
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== "ERR_MODULE_NOT_FOUND") throw error;
      throw new CronwardenError(
        "INVALID_SETTINGS",
        "EtcdConfigSource needs the etcd3 package, an optional peer dependency of cronwarden: install it with `npm i etcd3`",
        { cause: error },
      );
    }
    const deadline = () => ({ deadline: Date.now() + this.#timeoutMs });
    return new Etcd3({
      hosts: [...this.endpoints],
      auth: this.#auth && { ...this.#auth, callOptions: deadline },
      dialTimeout: this.#timeoutMs,
      defaultCallOptions: (context) => (context.isStream ? {} : deadline()),
      grpcOptions: {
        // a half-open connection (host gone, network partition) ends the watch instead of stalling it
        "grpc.keepalive_time_ms": 30_000,
        "grpc.keepalive_timeout_ms": 10_000,
        "grpc.max_reconnect_backoff_ms": RECONNECT.maxMs,
      },
    });
  }

  #error(code: CronwardenErrorCode, detail: string, cause?: unknown): CronwardenError {
    const secrets = this.#auth ? [this.#auth.password] : [];
    return new CronwardenError(
      code,
      maskSecrets(`config ${this.description}: ${detail}`, secrets),
      cause === undefined ? undefined : { cause: toError(cause) },
    );
  }
}

/** etcd3's message, without gRPC's trailing resolver note. */
function etcdMessage(thrown: unknown): string {
  return toError(thrown)
    .message.replace(/\s*Resolution note:.*$/s, "")
    .trim();
}

async function cancelWithin(watcher: Watcher, ms: number): Promise<void> {
  await Promise.race([watcher.cancel().catch(() => undefined), delay(ms, undefined, { ref: false })]);
}

function nonEmpty(name: string, value: string): string {
  if (value === "") throw new CronwardenError("INVALID_SETTINGS", `etcd ${name} must not be empty`);
  return value;
}

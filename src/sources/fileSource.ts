import { createHash } from "node:crypto";
import { type FSWatcher, watch } from "node:fs";
import { readFile, stat } from "node:fs/promises";
import path from "node:path";
import { CronwardenError } from "../core/errors.js";
import { toError } from "../core/logger.js";
import type { ConfigDocument, ConfigListener, ConfigSource } from "./configSource.js";
import { DEFAULT_DOCUMENT_LIMITS, type DocumentLimits } from "./documentLimits.js";
import { ANY_FORMAT, type DocumentFormat, parseDocument } from "./parseDocument.js";

export interface FileSourceOptions {
  /** JSON (`.json`) or YAML (`.yaml`, `.yml`); other extensions are tried as JSON, then YAML. */
  path: string;
  /** Bursts of file events within this window cause one reload. */
  debounceMs?: number;
  /** A bigger file is refused (an accident, not a config); default 1 MiB. */
  maxBytes?: number;
  /**
   * A document with more collection items and keys is refused before parsing
   * (src/sources/documentLimits.ts); default 120,000, about 25,000 tasks. Raise it with maxBytes
   * for a larger config (100,000 tasks of four fields: about 500,000).
   */
  maxNodes?: number;
  /**
   * A stat() check at this interval catches changes that file events miss (network and overlay
   * file systems, a replaced parent directory). 0 turns it off.
   */
  pollIntervalMs?: number;
  /** What a "cannot be read: ENOENT" error suggests; default: the service's CRONWARDEN_CONFIG_FILE. */
  missingHint?: string;
}

const DEFAULT_DEBOUNCE_MS = 200;
const DEFAULT_POLL_INTERVAL_MS = 5_000;
const DEFAULT_MAX_BYTES = 1024 * 1024;

/**
 * A watched config file. It watches the file's directory rather than the file, so that editors
 * that save by rename and Kubernetes config-map mounts (a `..data` symlink swapped atomically)
 * are seen: a watch on the file itself would stay on the replaced inode.
 */
export class FileConfigSource implements ConfigSource {
  readonly path: string;
  readonly description: string;
  readonly #debounceMs: number;
  readonly #pollIntervalMs: number;
  readonly #maxBytes: number;
  readonly #limits: DocumentLimits;
  readonly #missingHint: string;

  constructor(options: FileSourceOptions) {
    this.path = path.resolve(options.path);
    this.description = `file ${this.path}`;
    this.#debounceMs = options.debounceMs ?? DEFAULT_DEBOUNCE_MS;
    this.#pollIntervalMs = options.pollIntervalMs ?? DEFAULT_POLL_INTERVAL_MS;
    this.#maxBytes = options.maxBytes ?? DEFAULT_MAX_BYTES;
    this.#limits = {
      ...DEFAULT_DOCUMENT_LIMITS,
      ...(options.maxNodes ? { maxNodes: options.maxNodes } : {}),
    };
    this.#missingHint =
      options.missingHint ??
      "create it or point CRONWARDEN_CONFIG_FILE at the right path (cronwarden serve: --config)";
  }

  async load(): Promise<ConfigDocument> {
    let text: string;
    try {
      const { size } = await stat(this.path);
      if (size > this.#maxBytes) {
        throw new CronwardenError(
          "INVALID_CONFIG",
          `config ${this.description} is ${size} bytes, over the limit of ${this.#maxBytes} bytes; it is ignored and the last valid config stays in force (raise maxBytes if the file is meant to be this big)`,
        );
      }
      text = await readFile(this.path, "utf8");
    } catch (thrown) {
      if (thrown instanceof CronwardenError) throw thrown;
      const error = toError(thrown);
      const code = (thrown as NodeJS.ErrnoException).code;
      const hint = code === "ENOENT" ? this.#missingHint : "check its permissions";
      throw new CronwardenError(
        "CONFIG_UNREADABLE",
        `config ${this.description} cannot be read (${error.message}); ${hint}`,
        {
          cause: error,
        },
      );
    }
    return {
      content: this.#parse(text),
      revision: createHash("sha256").update(text).digest("hex").slice(0, 16),
    };
  }

  subscribe(listener: ConfigListener): () => Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    let lastStamp: string | undefined;
    let closed = false;
    let reading = Promise.resolve();

    const reload = () => {
      reading = reading.then(async () => {
        if (closed) return;
        try {
          listener.next(await this.load());
        } catch (thrown) {
          listener.error(toError(thrown));
        }
      });
    };
    const schedule = () => {
      if (closed) return;
      clearTimeout(timer);
      timer = setTimeout(reload, this.#debounceMs);
    };
    const stamp = async () => {
      const info = await stat(this.path).catch(() => undefined);
      return info ? `${info.ino}:${info.size}:${info.mtimeMs}` : "missing";
    };

    let watcher: FSWatcher | undefined;
    try {
      const base = path.basename(this.path);
      watcher = watch(path.dirname(this.path), { persistent: false }, (_event, filename) => {
        // other files in the folder (the service's own log file, say) must not trigger reloads;
        // "..data" is the symlink a Kubernetes config-map mount swaps atomically
        const name = filename?.toString();
        if (name === undefined || name === base || name.startsWith("..")) schedule();
      });
      watcher.on("error", (error) => listener.error(toError(error)));
    } catch (thrown) {
      listener.error(
        new Error(`cannot watch ${path.dirname(this.path)} (${toError(thrown).message}); relying on polling`),
      );
    }

    void stamp().then((initial) => {
      lastStamp = initial;
    });
    const poller =
      this.#pollIntervalMs > 0
        ? setInterval(async () => {
            const current = await stamp();
            if (lastStamp !== undefined && current !== lastStamp) schedule();
            lastStamp = current;
          }, this.#pollIntervalMs)
        : undefined;
    poller?.unref();

    return async () => {
      closed = true;
      clearTimeout(timer);
      clearInterval(poller);
      watcher?.close();
      await reading;
    };
  }

  #parse(text: string): unknown {
    const extension = path.extname(this.path).toLowerCase();
    const formats: readonly DocumentFormat[] =
      extension === ".json"
        ? ["json"]
        : extension === ".yaml" || extension === ".yml"
          ? ["yaml"]
          : ANY_FORMAT;
    try {
      return parseDocument(text, formats, this.#limits);
    } catch (thrown) {
      throw new CronwardenError(
        "INVALID_CONFIG",
        `config ${this.description} cannot be parsed (${toError(thrown).message}); fix the syntax, the last valid config stays in force`,
        { cause: thrown },
      );
    }
  }
}

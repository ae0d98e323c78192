import { createHash } from "node:crypto";
import { formatDelay, retryDelay, sleep } from "../core/backoff.js";
import { CronwardenError, type CronwardenErrorCode } from "../core/errors.js";
import { toError } from "../core/logger.js";
import { maskSecrets, redactUrl, SENSITIVE_NAME } from "../observability/redact.js";
import type { ConfigDocument, ConfigListener, ConfigSource } from "./configSource.js";
import { applyNamespace } from "./namespace.js";
import { notifyError, notifyNext } from "./notify.js";
import { positive } from "./optionChecks.js";
import { ANY_FORMAT, type DocumentFormat, formatOfContentType, parseDocument } from "./parseDocument.js";

export interface HttpSourceOptions {
  /** The document's URL, http or https; `{namespace}` is replaced by `namespace` (URL-encoded). */
  url: string;
  /** The environment (dev, staging, prod...) filled into the URL's `{namespace}` placeholder. */
  namespace?: string;
  /** Time between two polls while the server answers. Default 10 s. */
  pollIntervalMs?: number;
  /** Per request, from sending it to the last byte of the body. Default 5 s. */
  timeoutMs?: number;
  /** Extra request headers. Values of headers named like auth, token, key, secret or cookie are masked in errors. */
  headers?: Record<string, string>;
  /** A header whose value is read from an environment variable at each request, e.g. `{ header: "Authorization", env: "CONFIG_TOKEN" }`. */
  authHeaderFromEnv?: { header: string; env: string };
  /** A body larger than this is refused (and not read past it). Default 1 MiB. */
  maxBytes?: number;
  /** Default: from the Content-Type (JSON or YAML), else JSON then YAML. */
  format?: DocumentFormat;
}

const DEFAULT_POLL_INTERVAL_MS = 10_000;
const DEFAULT_TIMEOUT_MS = 5_000;
const DEFAULT_MAX_BYTES = 1024 * 1024;

/** What the last 200 said, sent back as a conditional request. */
interface Validators {
  etag?: string;
  lastModified?: string;
  revision?: string;
}

type Fetched = { modified: true; document: ConfigDocument; validators: Validators } | { modified: false };

/**
 * The desired state polled from a URL (a config center's HTTP API, an object store, a static file
 * server). Conditional requests (ETag, Last-Modified) make an unchanged document cost a 304.
 * While the server fails, each failed poll is reported and the next one backs off: the delay
 * starts at a quarter of the poll interval and doubles up to 4 intervals (±25% jitter); the first
 * success returns to the normal interval.
 */
export class HttpConfigSource implements ConfigSource {
  readonly url: string;
  readonly description: string;
  readonly #pollIntervalMs: number;
  readonly #timeoutMs: number;
  readonly #maxBytes: number;
  readonly #format: DocumentFormat | undefined;
  readonly #headers: Record<string, string>;
  readonly #authHeaderFromEnv: { header: string; env: string } | undefined;
  /** From the last load(): a subscription starts from them, so it delivers only what changed since. */
  #loaded: Validators = {};

  constructor(options: HttpSourceOptions) {
    this.url = applyNamespace(options.url, options.namespace, "url", encodeURIComponent);
    let parsed: URL;
    try {
      parsed = new URL(this.url);
    } catch {
      throw new CronwardenError("INVALID_SETTINGS", `url ${redactUrl(this.url)} is not a valid URL`);
    }
    if (parsed.protocol !== "http:" && parsed.protocol !== "https:") {
      throw new CronwardenError("INVALID_SETTINGS", `url must be http: or https:, not ${parsed.protocol}`);
    }
    if (parsed.username || parsed.password) {
      throw new CronwardenError(
        "INVALID_SETTINGS",
        "url must not contain credentials (user:password@); pass them in headers or authHeaderFromEnv",
      );
    }
    this.#pollIntervalMs = positive("pollIntervalMs", options.pollIntervalMs ?? DEFAULT_POLL_INTERVAL_MS);
    this.#timeoutMs = positive("timeoutMs", options.timeoutMs ?? DEFAULT_TIMEOUT_MS);
    this.#maxBytes = positive("maxBytes", options.maxBytes ?? DEFAULT_MAX_BYTES);
    this.#format = options.format;
    try {
      new Headers(options.headers);
    } catch {
      throw new CronwardenError("INVALID_SETTINGS", "headers hold an invalid header name or value");
    }
    this.#headers = { ...options.headers };
    this.#authHeaderFromEnv = options.authHeaderFromEnv;
    this.description = `http ${redactUrl(this.url)}`;
  }

  async load(): Promise<ConfigDocument> {
    const fetched = await this.#fetch({});
    if (!fetched.modified) throw this.#error("CONFIG_UNREADABLE", "answered 304 to an unconditional request");
    this.#loaded = fetched.validators;
    return fetched.document;
  }

  subscribe(listener: ConfigListener): () => Promise<void> {
    const closing = new AbortController();
    const polling = this.#poll(listener, closing.signal);
    return async () => {
      closing.abort();
      await polling;
    };
  }

  /** The polling loop: never throws; ends when `signal` aborts. The first poll is immediate. */
  async #poll(listener: ConfigListener, signal: AbortSignal): Promise<void> {
    let validators: Validators = { ...this.#loaded };
    let failures = 0;
    while (!signal.aborted) {
      let nextPollMs = this.#pollIntervalMs;
      try {
        const fetched = await this.#fetch(validators, signal);
        failures = 0;
        if (fetched.modified) {
          const changed = fetched.document.revision !== validators.revision;
          validators = fetched.validators;
          if (changed) notifyNext(listener, fetched.document);
        }
      } catch (thrown) {
        if (signal.aborted) break;
        failures += 1;
        nextPollMs = retryDelay(failures, {
          initialMs: this.#pollIntervalMs / 4,
          maxMs: this.#pollIntervalMs * 4,
        });
        const error = toError(thrown);
        const code = error instanceof CronwardenError ? error.code : "CONFIG_UNREADABLE";
        notifyError(
          listener,
          new CronwardenError(code, `${error.message}; next attempt in ${formatDelay(nextPollMs)}`),
        );
      }
      await sleep(nextPollMs, signal);
    }
  }

  /** One GET. Throws a CronwardenError naming the URL; `signal` (unsubscribe) aborts it quietly. */
  async #fetch(validators: Validators, signal?: AbortSignal): Promise<Fetched> {
    const headers = this.#requestHeaders(validators);
    const timeout = AbortSignal.timeout(this.#timeoutMs);
    const describe = (thrown: unknown) => {
      if (signal?.aborted) return toError(thrown);
      if (timeout.aborted) return this.#error("CONFIG_UNREADABLE", `timed out after ${this.#timeoutMs} ms`);
      const reason = networkMessage(thrown);
      const hint = /redirect/i.test(reason)
        ? "; redirects are not followed: point url at the final location"
        : "";
      return this.#error("CONFIG_UNREADABLE", `request failed (${reason})${hint}`, thrown);
    };
    let response: Response;
    try {
      response = await fetch(this.url, {
        headers,
        signal: signal ? AbortSignal.any([timeout, signal]) : timeout,
        // a redirect to another host would carry the headers there (fetch drops only Authorization)
        redirect: "error",
      });
    } catch (thrown) {
      throw describe(thrown);
    }
    if (response.status === 304 && (validators.etag || validators.lastModified)) {
      await response.body?.cancel().catch(() => undefined);
      return { modified: false };
    }
    if (response.status !== 200) {
      await response.body?.cancel().catch(() => undefined);
      throw this.#error(
        "CONFIG_UNREADABLE",
        `answered HTTP ${response.status} ${response.statusText}`.trim(),
      );
    }
    let body: Buffer;
    try {
      body = await this.#readBody(response);
    } catch (thrown) {
      throw thrown instanceof CronwardenError ? thrown : describe(thrown);
    }
    const etag = response.headers.get("etag") ?? undefined;
    const lastModified = response.headers.get("last-modified") ?? undefined;
    const revision = etag ?? createHash("sha256").update(body).digest("hex").slice(0, 16);
    const content = this.#parse(body, response.headers.get("content-type"));
    return { modified: true, document: { content, revision }, validators: { etag, lastModified, revision } };
  }

  #requestHeaders(validators: Validators): Headers {
    const headers = new Headers(this.#headers);
    const auth = this.#authHeaderFromEnv;
    if (auth) {
      const value = process.env[auth.env];
      if (!value) {
        throw this.#error(
          "CONFIG_UNREADABLE",
          `environment variable ${auth.env} (for the ${auth.header} header) is not set or empty`,
        );
      }
      try {
        headers.set(auth.header, value);
      } catch {
        // the platform's message would quote the value
        throw this.#error(
          "CONFIG_UNREADABLE",
          `environment variable ${auth.env} does not hold a valid value for the ${auth.header} header`,
        );
      }
    }
    if (validators.etag) headers.set("if-none-match", validators.etag);
    if (validators.lastModified) headers.set("if-modified-since", validators.lastModified);
    headers.set(
      "accept",
      this.#format === "json"
        ? "application/json"
        : this.#format === "yaml"
          ? "application/yaml"
          : "application/json, application/yaml;q=0.9, */*;q=0.5",
    );
    return headers;
  }

  /** The body, refused once it passes maxBytes (by Content-Length, or while reading). */
  async #readBody(response: Response): Promise<Buffer> {
    const tooLarge = (detail: string) =>
      this.#error("CONFIG_UNREADABLE", `body ${detail} the limit of ${this.#maxBytes} bytes (maxBytes)`);
    const declared = Number(response.headers.get("content-length") ?? Number.NaN);
    if (declared > this.#maxBytes) {
      await response.body?.cancel().catch(() => undefined);
      throw tooLarge(`is ${declared} bytes (Content-Length), over`);
    }
    const chunks: Uint8Array[] = [];
    let total = 0;
    const reader = response.body?.getReader();
    for (;;) {
      const chunk = await reader?.read();
      if (!chunk || chunk.done) break;
      total += chunk.value.byteLength;
      if (total > this.#maxBytes) {
        await reader?.cancel().catch(() => undefined);
        throw tooLarge("was not read further: it passed");
      }
      chunks.push(chunk.value);
    }
    return Buffer.concat(chunks);
  }

  #parse(body: Buffer, contentType: string | null): unknown {
    let text: string;
    try {
      text = new TextDecoder("utf-8", { fatal: true }).decode(body);
    } catch {
      throw this.#error("INVALID_CONFIG", "body is not valid UTF-8");
    }
    if (text.trim() === "") {
      throw this.#error(
        "CONFIG_UNREADABLE",
        `empty body (${body.byteLength} bytes); expected a desired-state document`,
      );
    }
    const format = this.#format ?? formatOfContentType(contentType);
    try {
      return parseDocument(text, format ? [format] : ANY_FORMAT);
    } catch (thrown) {
      throw this.#error(
        "INVALID_CONFIG",
        `body cannot be parsed (${toError(thrown).message}); the last valid config stays in force`,
      ); // no cause: the parser's own message quotes the body unmasked
    }
  }

  /** An error naming the source; secrets this source knows of are masked in the detail. */
  #error(code: CronwardenErrorCode, detail: string, cause?: unknown): CronwardenError {
    const secrets = Object.entries(this.#headers)
      .filter(([name]) => SENSITIVE_NAME.test(name))
      .map(([, value]) => value);
    const fromEnv = this.#authHeaderFromEnv && process.env[this.#authHeaderFromEnv.env];
    if (fromEnv) secrets.push(fromEnv);
    const text = maskSecrets(`config ${this.description}: ${detail}`, secrets);
    return new CronwardenError(code, text, cause === undefined ? undefined : { cause: toError(cause) });
  }
}

/** undici reports "fetch failed" and puts the reason (ECONNREFUSED, ENOTFOUND, a TLS error) in `cause`. */
function networkMessage(thrown: unknown): string {
  const error = toError(thrown);
  const cause = error.cause;
  if (cause instanceof Error) {
    const code = (cause as NodeJS.ErrnoException).code;
    return cause.message || code || error.message;
  }
  return error.message;
}

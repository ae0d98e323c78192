import { CronwardenError } from "../core/errors.js";
import { registerSecret } from "../observability/redact.js";
import type { Alert, AlertChannel } from "./alert.js";
import { slackText } from "./slackText.js";

export type WebhookFormat = "json" | "slack";

export interface WebhookChannelOptions {
  /** http(s) URL to POST to. Often a secret itself (Slack's): it never appears in logs or errors. */
  url: string;
  /** "json": the Alert itself; "slack": `{ text }` for Slack-style incoming webhooks. Default "json". */
  format?: WebhookFormat;
  /** Give up on one POST after this long. Default 5000. */
  timeoutMs?: number;
  /** Extra request headers (e.g. an Authorization for your receiver). */
  headers?: Record<string, string>;
  /** The channel's name in logs and metrics. Default `webhook:<host>`. */
  name?: string;
}

/**
 * POSTs each alert as JSON. Format "json" sends
 * `{ event, task, severity, summary, details, at, instanceId }` (`at` as ISO 8601); format
 * "slack" sends `{ text }`. A non-2xx answer, a network error or no answer within `timeoutMs`
 * rejects with a message naming the channel (its host), never the full URL.
 */
export class WebhookAlertChannel implements AlertChannel {
  readonly name: string;
  readonly #url: URL;
  readonly #format: WebhookFormat;
  readonly #timeoutMs: number;
  readonly #headers: Record<string, string>;

  constructor(options: WebhookChannelOptions) {
    let url: URL;
    try {
      url = new URL(options.url);
    } catch {
      throw new CronwardenError("INVALID_SETTINGS", "the alert webhook URL is not a valid URL");
    }
    // the URL is the credential (Slack-style webhooks): never in a log line, response or alert
    registerSecret(options.url);
    if (url.pathname.length >= 16) registerSecret(url.pathname);
    if (url.protocol !== "http:" && url.protocol !== "https:")
      throw new CronwardenError(
        "INVALID_SETTINGS",
        `the alert webhook URL must be http:// or https://, not ${url.protocol}//`,
      );
    const format = options.format ?? "json";
    if (format !== "json" && format !== "slack")
      throw new CronwardenError(
        "INVALID_SETTINGS",
        `the alert webhook format must be "json" or "slack", not "${format}"`,
      );
    const timeoutMs = options.timeoutMs ?? 5000;
    if (!Number.isInteger(timeoutMs) || timeoutMs < 1)
      throw new CronwardenError(
        "INVALID_SETTINGS",
        `the alert webhook timeoutMs must be a whole number >= 1, got ${timeoutMs}`,
      );
    this.#url = url;
    this.#format = format;
    this.#timeoutMs = timeoutMs;
    this.#headers = { ...options.headers, "content-type": "application/json" };
    this.name = options.name ?? `webhook:${url.host}`;
  }

  async send(alert: Alert): Promise<void> {
    const body = JSON.stringify(this.#format === "slack" ? { text: slackText(alert) } : alert);
    let response: Response;
    try {
      response = await fetch(this.#url, {
        method: "POST",
        headers: this.#headers,
        body,
        redirect: "error",
        signal: AbortSignal.timeout(this.#timeoutMs),
      });
    } catch (error) {
      const timedOut = error instanceof Error && error.name === "TimeoutError";
      throw new Error(
        timedOut
          ? `${this.name} did not answer within ${this.#timeoutMs} ms`
          : `${this.name} unreachable: ${describeCause(error)}`,
      );
    }
    await response.body?.cancel().catch(() => {});
    if (!response.ok) throw new Error(`${this.name} answered HTTP ${response.status}`);
  }
}

/** fetch() says "fetch failed"; the reason (ECONNREFUSED, ...) is in its cause. */
function describeCause(error: unknown): string {
  if (!(error instanceof Error)) return String(error);
  const cause = error.cause;
  if (cause instanceof Error) {
    const code = "code" in cause && typeof cause.code === "string" ? cause.code : undefined;
    return code ?? cause.message;
  }
  return error.message;
}

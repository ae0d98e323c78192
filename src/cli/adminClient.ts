import type { z } from "zod";
import { CliError, type CliIo } from "./common.js";

export const DEFAULT_ADMIN_URL = "http://127.0.0.1:8787";
const REQUEST_TIMEOUT_MS = 10_000;

export interface AdminConnectionOptions {
  url?: string | undefined;
  token?: string | undefined;
}

/**
 * Calls the admin API at `--url` (else CRONWARDEN_ADMIN_URL, else http://127.0.0.1:8787) with
 * `--token` (else CRONWARDEN_ADMIN_TOKEN). Exit codes: a 404/409 refusal is 1; an unreachable
 * server, an auth failure, any other error status or an unexpected answer is 2.
 */
export class AdminClient {
  readonly baseUrl: URL;
  readonly #token: string | undefined;

  constructor(options: AdminConnectionOptions, io: CliIo) {
    const raw = options.url ?? io.env.CRONWARDEN_ADMIN_URL ?? DEFAULT_ADMIN_URL;
    let url: URL;
    try {
      url = new URL(raw);
    } catch {
      throw new CliError(`--url ${raw} is not a valid URL (e.g. ${DEFAULT_ADMIN_URL})`);
    }
    if (url.protocol !== "http:" && url.protocol !== "https:")
      throw new CliError(`--url ${raw} must be an http:// or https:// URL`);
    this.baseUrl = url;
    const token = options.token ?? io.env.CRONWARDEN_ADMIN_TOKEN;
    this.#token = token === "" ? undefined : token;
  }

  async request<T extends z.ZodType>(
    method: "GET" | "POST",
    path: string,
    schema: T,
    /** Sent as JSON (a POST's body). */
    json?: unknown,
  ): Promise<{ status: number; body: z.output<T> }> {
    const url = new URL(
      path.replace(/^\//, ""),
      this.baseUrl.href.endsWith("/") ? this.baseUrl : `${this.baseUrl.href}/`,
    );
    let response: Response;
    try {
      response = await fetch(url, {
        method,
        headers: {
          accept: "application/json",
          ...(this.#token ? { authorization: `Bearer ${this.#token}` } : {}),
          ...(json === undefined ? {} : { "content-type": "application/json" }),
        },
        ...(json === undefined ? {} : { body: JSON.stringify(json) }),
        signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
      });
    } catch (error) {
      throw new CliError(`cannot reach the admin API at ${this.baseUrl.origin}: ${reason(error)}`);
    }
    const text = await response.text();
    let body: unknown;
    try {
      body = text === "" ? undefined : JSON.parse(text);
    } catch {
      throw new CliError(
        `${method} ${url.pathname} answered HTTP ${response.status} with a body that is not JSON`,
      );
    }
    if (!response.ok) {
      const message = errorMessage(body) ?? `HTTP ${response.status}`;
      const refused = response.status === 404 || response.status === 409;
      const hint = response.status === 401 ? " (pass --token or set CRONWARDEN_ADMIN_TOKEN)" : "";
      throw new CliError(`${message}${hint}`, refused ? 1 : 2);
    }
    const parsed = schema.safeParse(body);
    if (!parsed.success) {
      throw new CliError(
        `unexpected answer from ${method} ${url.pathname}: ${parsed.error.issues[0]?.message ?? "invalid"} at ${parsed.error.issues[0]?.path.join(".") ?? "?"}`,
      );
    }
    return { status: response.status, body: parsed.data };
  }
}

function errorMessage(body: unknown): string | undefined {
  if (typeof body === "object" && body !== null && "error" in body && typeof body.error === "string")
    return body.error;
  return undefined;
}

function reason(error: unknown): string {
  if (!(error instanceof Error)) return String(error);
  if (error.name === "TimeoutError") return `no answer within ${REQUEST_TIMEOUT_MS / 1000} s`;
  const cause = error.cause;
  if (cause instanceof Error)
    return "code" in cause && typeof cause.code === "string" ? cause.code : cause.message;
  return error.message;
}

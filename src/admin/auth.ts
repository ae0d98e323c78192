import { createHash, timingSafeEqual } from "node:crypto";
import type { FastifyRequest } from "fastify";
import { CronwardenError } from "../scheduler/errors.js";
import { HttpError } from "./httpErrors.js";

export const TOKEN_VARIABLE = "CRONWARDEN_ADMIN_TOKEN";
export const MIN_TOKEN_LENGTH = 16;

/** 127.0.0.0/8, ::1 and localhost: reachable from this machine only. */
export function isLoopback(host: string): boolean {
  const bare = host.replace(/^\[|\]$/g, "").toLowerCase();
  return bare === "localhost" || bare === "::1" || /^127(\.\d{1,3}){3}$/.test(bare);
}

/**
 * The admin API's access rule: a bearer token protects the mutating endpoints always, and every
 * endpoint when the server listens beyond loopback. Without a token, mutating calls are refused
 * and binding beyond loopback is refused at construction.
 */
export class AccessPolicy {
  readonly #tokenDigest: Buffer | undefined;
  readonly #protectReads: boolean;

  constructor(host: string, token: string | undefined) {
    if (token !== undefined && token.length < MIN_TOKEN_LENGTH)
      throw new CronwardenError(
        "INVALID_SETTINGS",
        `the admin token (${TOKEN_VARIABLE}) must be at least ${MIN_TOKEN_LENGTH} characters`,
      );
    if (token === undefined && !isLoopback(host))
      throw new CronwardenError(
        "INVALID_SETTINGS",
        `refusing to serve the admin API on ${host} (beyond loopback) without a token: set ${TOKEN_VARIABLE}, or bind to 127.0.0.1`,
      );
    this.#tokenDigest = token === undefined ? undefined : digest(token);
    this.#protectReads = !isLoopback(host);
  }

  /** Throws the HttpError (401/403) that refuses this request, if any. */
  check(request: FastifyRequest): void {
    const mutating = !["GET", "HEAD", "OPTIONS"].includes(request.method);
    if (!mutating && !this.#protectReads) return;
    if (this.#tokenDigest === undefined) {
      throw new HttpError(
        403,
        `${request.method} ${request.routeOptions.url ?? request.url} is disabled: no admin token is configured; set ${TOKEN_VARIABLE} to enable it`,
      );
    }
    const header = request.headers.authorization;
    const match = typeof header === "string" ? /^Bearer\s+(\S+)\s*$/i.exec(header) : null;
    const challenge = { "www-authenticate": 'Bearer realm="cronwarden"' };
    if (!match?.[1]) {
      throw new HttpError(401, "missing bearer token: send 'Authorization: Bearer <admin token>'", challenge);
    }
    if (!timingSafeEqual(digest(match[1]), this.#tokenDigest)) {
      throw new HttpError(401, "invalid bearer token", {
        "www-authenticate": 'Bearer realm="cronwarden", error="invalid_token"',
      });
    }
  }
}

/** Both sides hashed first: equal lengths for timingSafeEqual, and the length of the token is not leaked. */
function digest(text: string): Buffer {
  return createHash("sha256").update(text, "utf8").digest();
}

import { createHash, timingSafeEqual } from "node:crypto";
import type { FastifyRequest } from "fastify";
import { CronwardenError } from "../core/errors.js";
import { HttpError } from "./httpErrors.js";
import {
  type AdminRole,
  type AdminToken,
  checkTokens,
  LEGACY_TOKEN_NAME,
  MIN_TOKEN_LENGTH,
  TOKEN_VARIABLE,
  TOKENS_VARIABLE,
} from "./tokens.js";

export { MIN_TOKEN_LENGTH, TOKEN_VARIABLE } from "./tokens.js";

/** Who made a request: a token's name and role, or nobody (a read on loopback). */
export type Caller = { kind: "token"; name: string; role: AdminRole } | { kind: "loopback" };

/** The name a request without a token goes by in the audit trail. */
export const LOOPBACK_CALLER = "loopback";

export function callerName(caller: Caller): string {
  return caller.kind === "token" ? caller.name : LOOPBACK_CALLER;
}

/** 127.0.0.0/8, ::1 and localhost: reachable from this machine only. */
export function isLoopback(host: string): boolean {
  const bare = host.replace(/^\[|\]$/g, "").toLowerCase();
  return bare === "localhost" || bare === "::1" || /^127(\.\d{1,3}){3}$/.test(bare);
}

const RANK: Record<AdminRole, number> = { viewer: 1, operator: 2 };

interface StoredToken {
  name: string;
  role: AdminRole;
  digest: Buffer;
}

/**
 * The admin API's access rule. Reading needs a viewer (or operator) token when the server
 * listens beyond loopback, and nothing on loopback; acting (every method but GET, HEAD and
 * OPTIONS) always needs an operator token. A token that is sent is always checked, so the
 * caller's name is known whenever one is given. Without any token, binding beyond loopback is
 * refused at construction; without an operator token, acting is refused (403).
 */
export class AccessPolicy {
  readonly #tokens: StoredToken[];
  readonly #protectReads: boolean;
  readonly #hasOperator: boolean;

  /** `legacyToken`: CRONWARDEN_ADMIN_TOKEN, an operator token named "admin". */
  constructor(host: string, legacyToken: string | undefined, tokens: readonly AdminToken[] = []) {
    if (legacyToken !== undefined && legacyToken.length < MIN_TOKEN_LENGTH)
      throw new CronwardenError(
        "INVALID_SETTINGS",
        `the admin token (${TOKEN_VARIABLE}) must be at least ${MIN_TOKEN_LENGTH} characters`,
      );
    const all = checkTokens(
      [
        ...tokens,
        ...(legacyToken === undefined
          ? []
          : [{ name: LEGACY_TOKEN_NAME, role: "operator" as const, secret: legacyToken }]),
      ],
      legacyToken === undefined ? TOKENS_VARIABLE : `${TOKENS_VARIABLE} and ${TOKEN_VARIABLE}`,
    );
    if (all.length === 0 && !isLoopback(host))
      throw new CronwardenError(
        "INVALID_SETTINGS",
        `refusing to serve the admin API on ${host} (beyond loopback) without a token: set ${TOKENS_VARIABLE} or ${TOKEN_VARIABLE}, or bind to 127.0.0.1`,
      );
    this.#tokens = all.map((token) => ({ name: token.name, role: token.role, digest: digest(token.secret) }));
    this.#protectReads = !isLoopback(host);
    this.#hasOperator = all.some((token) => token.role === "operator");
  }

  /** The names and roles of the configured tokens (no secrets), for the start-up log line. */
  describe(): Array<{ name: string; role: AdminRole }> {
    return this.#tokens.map(({ name, role }) => ({ name, role }));
  }

  /** The caller, or throws the HttpError (401/403) that refuses this request. */
  check(request: FastifyRequest): Caller {
    const acting = !["GET", "HEAD", "OPTIONS"].includes(request.method);
    const needed: AdminRole | undefined = acting ? "operator" : this.#protectReads ? "viewer" : undefined;
    const what = `${request.method} ${request.routeOptions.url ?? request.url.split("?")[0]}`;
    if (needed === "operator" && !this.#hasOperator) {
      throw new HttpError(
        403,
        `${what} is disabled: no operator token is configured; set ${TOKEN_VARIABLE}, or ${TOKENS_VARIABLE}=<name>:operator:<secret>, to enable it`,
      );
    }
    const header = request.headers.authorization;
    const match = typeof header === "string" ? /^Bearer\s+(\S+)\s*$/i.exec(header) : null;
    if (!match?.[1]) {
      if (header === undefined && needed === undefined) return { kind: "loopback" };
      throw new HttpError(
        401,
        `missing bearer token: send 'Authorization: Bearer <${needed ?? "viewer"} token>'`,
        { "www-authenticate": 'Bearer realm="cronwarden"' },
      );
    }
    const token = this.#find(match[1]);
    if (!token) {
      throw new HttpError(401, "invalid bearer token", {
        "www-authenticate": 'Bearer realm="cronwarden", error="invalid_token"',
      });
    }
    if (needed !== undefined && RANK[token.role] < RANK[needed]) {
      throw new HttpError(
        403,
        `token "${token.name}" is a ${token.role} token; ${what} needs ${needed === "operator" ? "an operator" : "a viewer"} token`,
        { "www-authenticate": 'Bearer realm="cronwarden", error="insufficient_scope"' },
      );
    }
    return { kind: "token", name: token.name, role: token.role };
  }

  /** Compares with every token, in constant time each and without stopping at a match. */
  #find(secret: string): StoredToken | undefined {
    const sent = digest(secret);
    let found: StoredToken | undefined;
    for (const token of this.#tokens) {
      if (timingSafeEqual(sent, token.digest) && found === undefined) found = token;
    }
    return found;
  }
}

/** Both sides hashed first: equal lengths for timingSafeEqual, and the length of the token is not leaked. */
function digest(text: string): Buffer {
  return createHash("sha256").update(text, "utf8").digest();
}

import { type LoggerOptions, stdSerializers } from "pino";

/**
 * The one redaction of cronwarden: everything that leaves the process (log lines, run records in
 * agenda_logs, alerts, HTTP responses) passes through `redactSecrets`. It masks
 * - passwords in URLs (`postgres://user:secret@host`) and `password=...` pairs (libpq keyword
 *   strings, JSON), whatever their value;
 * - every secret registered with `registerSecret` (the database password, admin tokens, the
 *   alert webhook URL, a config source's headers), verbatim, wherever it appears, including inside
 *   a task's own error message and stack.
 */
const URL_PASSWORD = /\b([a-z][a-z0-9+.-]*:\/\/[^\s:/?#@]*:)[^\s/?#@]+@/gi;
const PASSWORD_PAIR = /\b(password"?\s*[=:]\s*)("[^"]*"|'[^']*'|[^\s,;&"'}]+)/gi;

export const REDACTED = "***";

/**
 * Registered values shorter than this are not masked verbatim (a 3-letter password would mask
 * every word containing it); in URLs and password pairs they are masked all the same.
 */
export const MIN_SECRET_LENGTH = 6;

const registered = new Set<string>();
/** `registered` as an array: every string that leaves the process is checked against it. */
let registeredList: readonly string[] = [];

/** Adds a value that must never leave the process in clear. Process-wide; repeated calls are harmless. */
export function registerSecret(value: string | undefined | null): void {
  if (typeof value !== "string" || value.length < MIN_SECRET_LENGTH || registered.has(value)) return;
  registered.add(value);
  registeredList = [...registered];
}

/** Registers the password of a connection string (`postgres://user:password@...`), if it has one. */
export function registerUrlPassword(url: string | undefined | null): void {
  if (!url) return;
  try {
    registerSecret(decodeURIComponent(new URL(url).password));
    registerSecret(new URL(url).password);
  } catch {
    // not a URL: its password pairs are masked by pattern
  }
}

export function redactSecrets(text: string, secrets: readonly string[] = NO_SECRETS): string {
  // every log line's and run record's strings pass here: nothing is allocated for a clean one
  let result = text.includes("://") ? text.replace(URL_PASSWORD, `$1${REDACTED}@`) : text;
  result = result.replace(PASSWORD_PAIR, (_match, key: string, value: string) => {
    const quote = value.startsWith('"') || value.startsWith("'") ? value.charAt(0) : "";
    return `${key}${quote}${REDACTED}${quote}`;
  });
  result = withoutSecrets(result, secrets);
  return withoutSecrets(result, registeredList);
}

const NO_SECRETS: readonly string[] = [];

function withoutSecrets(text: string, secrets: readonly string[]): string {
  let result = text;
  for (const secret of secrets) {
    if (secret.length > 0 && result.includes(secret)) result = result.split(secret).join(REDACTED);
  }
  return result;
}

/** Strings anywhere in a plain value (objects, arrays; 8 levels deep), redacted; other values kept. */
export function redactValue<T>(value: T, depth = 8): T {
  return redactWalk(value, depth, 0) as T;
}

/**
 * redactValue, and in the first `keyLevels` levels of plain objects (arrays count as a level, as
 * in pino's `*` paths) the value of every secret-named key (SECRET_KEYS) masked whatever it is.
 */
function redactWalk(value: unknown, depth: number, keyLevels: number): unknown {
  if (typeof value === "string") return redactSecrets(value);
  if (depth <= 0 || value === null || typeof value !== "object") return value;
  if (Array.isArray(value)) return value.map((item) => redactWalk(item, depth - 1, keyLevels - 1));
  if (value instanceof Error) return redactError(value);
  if (Object.getPrototypeOf(value) !== Object.prototype && Object.getPrototypeOf(value) !== null)
    return value;
  const copy: Record<string, unknown> = {};
  const object = value as Record<string, unknown>;
  for (const key of Object.keys(object)) {
    const item = object[key];
    copy[key] =
      keyLevels > 0 && item !== undefined && SECRET_KEY_SET.has(key)
        ? REDACTED
        : redactWalk(item, depth - 1, keyLevels - 1);
  }
  return copy;
}

/** A copy of the error whose message and stack are redacted (its name, code and class kept). */
export function redactError(error: Error): Error {
  const message = redactSecrets(error.message);
  const stack = error.stack === undefined ? undefined : redactSecrets(error.stack);
  if (message === error.message && stack === error.stack) return error;
  const copy = Object.create(Object.getPrototypeOf(error)) as Error;
  for (const key of Object.getOwnPropertyNames(error)) {
    const descriptor = Object.getOwnPropertyDescriptor(error, key);
    if (descriptor) Object.defineProperty(copy, key, descriptor);
  }
  Object.defineProperty(copy, "message", {
    value: message,
    enumerable: false,
    writable: true,
    configurable: true,
  });
  Object.defineProperty(copy, "stack", {
    value: stack,
    enumerable: false,
    writable: true,
    configurable: true,
  });
  return copy;
}

/** Keys whose values are secrets by name, masked at any depth up to two (`key`, `*.key`, `*.*.key`). */
const SECRET_KEYS = ["password", "token", "authorization", "connectionString", "databaseUrl", "webhookUrl"];
const SECRET_KEY_SET = new Set(SECRET_KEYS);
/** The line's own keys and two levels below them. */
const SECRET_KEY_LEVELS = 3;

/**
 * Every field of a log line redacted, except errors (their serializer does it); secret-named keys
 * (SECRET_KEYS) masked down to two levels below the line.
 */
export function redactLogFields(object: object): Record<string, unknown> {
  const copy: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(object)) {
    if (key === "err" || key === "error") copy[key] = value;
    else if (value !== undefined && SECRET_KEY_SET.has(key)) copy[key] = REDACTED;
    else copy[key] = redactWalk(value, 8, SECRET_KEY_LEVELS - 1);
  }
  return copy;
}

/**
 * The pino options that make a logger redact: `redact` for secret-named keys of the line itself
 * and of child bindings, a serializer that redacts errors' messages and stacks (and their causes),
 * a formatter for every other string of the line and secret-named keys below its top level, and a
 * hook for the message itself.
 *
 * Nested keys are masked by the formatter rather than by pino's wildcard paths (`*.password`):
 * pino runs a wildcard path's redactor on every field of every line, which parses each path again
 * and clones the field: tens of kilobytes per line, which a large reconcile (a line per task)
 * multiplies.
 */
export function redactingLoggerOptions(): Pick<
  LoggerOptions,
  "redact" | "serializers" | "formatters" | "hooks"
> {
  const serializeError = (error: unknown) => {
    if (!(error instanceof Error)) return redactWalk(error, 8, SECRET_KEY_LEVELS - 1);
    // pino's serialized error has a prototype of its own: copied to a plain object to be walked
    const serialized = stdSerializers.err(error) as unknown as Record<string, unknown>;
    const plain: Record<string, unknown> = {};
    for (const key in serialized) plain[key] = serialized[key];
    return redactWalk(plain, 8, SECRET_KEY_LEVELS - 1);
  };
  return {
    redact: { paths: [...SECRET_KEYS], censor: REDACTED },
    serializers: { err: serializeError, error: serializeError },
    formatters: { log: redactLogFields },
    hooks: {
      logMethod(args, method) {
        // strings redacted; objects interpolated into the message (`%j`, `%o`) as a line's fields
        const redacted = args.map((arg, index) =>
          typeof arg === "string"
            ? redactSecrets(arg)
            : index === 0 || arg === null || typeof arg !== "object"
              ? arg
              : arg instanceof Error
                ? redactError(arg)
                : redactLogFields(arg),
        ) as typeof args;
        method.apply(this, redacted);
      },
    },
  };
}

// --- config sources: masking of secrets a source knows (headers) in parser messages and URLs ---

/** Header and query-parameter names whose values are secrets. */
export const SENSITIVE_NAME = /auth|token|secret|password|passw|key|cookie|session|signature|credential/i;

/**
 * Masks each secret, and any 8 characters in a row of it: parser messages quote fragments of the
 * body (V8's JSON errors show a few characters around the fault), which may echo a header.
 */
export function maskSecrets(text: string, secrets: string[]): string {
  const window = 8;
  let masked = redactSecrets(text);
  for (const secret of secrets) {
    if (secret.length < window) {
      if (secret) masked = masked.replaceAll(secret, REDACTED);
      continue;
    }
    masked = masked.replaceAll(secret, REDACTED);
    for (let start = 0; start + window <= secret.length; start += 1) {
      masked = masked.replaceAll(secret.slice(start, start + window), REDACTED);
    }
  }
  return masked;
}

/** The URL with values of query parameters named like secrets masked, for logs and errors. */
export function redactUrl(url: string): string {
  return url.replace(/([?&][^=&#]*=)([^&#]*)/g, (match, name: string) =>
    SENSITIVE_NAME.test(name) ? `${name}${REDACTED}` : match,
  );
}

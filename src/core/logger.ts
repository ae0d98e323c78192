import { type Logger as PinoLogger, pino } from "pino";
import { redactingLoggerOptions, redactLogFields } from "../observability/redact.js";

/**
 * The logger every framework component writes to: structured JSON lines (pino).
 * Components receive a child logger bound to their role (`{ component: "reconciler" }`).
 */
export type Logger = PinoLogger;

export interface LoggerOptions {
  level?: string;
  /** Where the JSON lines go; defaults to stdout. Tests pass a stream they can read. */
  destination?: NodeJS.WritableStream;
}

/** A pino logger that redacts secrets (src/observability/redact.ts) in every field and message. */
export function createLogger(options: LoggerOptions = {}): Logger {
  const level = options.level ?? process.env.LOG_LEVEL ?? "info";
  const settings = { level, base: { pid: process.pid }, ...redactingLoggerOptions() };
  return options.destination ? pino(settings, options.destination as pino.DestinationStream) : pino(settings);
}

/**
 * A child of any pino logger (one the application made itself, too) that redacts secrets in its
 * fields and errors. The message text is redacted by loggers from createLogger(); the scheduler's
 * messages that quote error text redact it themselves.
 */
export function redactingChild(logger: Logger, bindings: Record<string, unknown>): Logger {
  const { redact, serializers } = redactingLoggerOptions();
  // `redact` masks secret-named keys of the line and of the bindings' top level; the rest here
  return logger.child(redactLogFields(bindings), {
    redact,
    serializers,
    formatters: { log: redactLogFields },
  });
}

/** Normalises anything thrown into an Error, so loops and logs never deal with `undefined` or strings. */
export function toError(thrown: unknown, fallbackMessage = "unknown error"): Error {
  if (thrown instanceof Error) return thrown;
  if (thrown === undefined || thrown === null) return new Error(fallbackMessage);
  if (typeof thrown === "string") return new Error(thrown);
  try {
    return new Error(JSON.stringify(thrown));
  } catch {
    return new Error(String(thrown));
  }
}

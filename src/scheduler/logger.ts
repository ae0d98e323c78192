import { type Logger as PinoLogger, pino } from "pino";

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

export function createLogger(options: LoggerOptions = {}): Logger {
  const level = options.level ?? process.env.LOG_LEVEL ?? "info";
  const base = { pid: process.pid };
  return options.destination
    ? pino({ level, base }, options.destination as pino.DestinationStream)
    : pino({ level, base });
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

import { format } from "node:util";
import type { Logger } from "./logger.js";

/** Where the captured lines go: the run's journal (src/engine/runJournal.ts) in the scheduler. */
export interface LineSink {
  record(level: string, msg: string, data?: Record<string, unknown>): void;
}

const LEVELS = new Set(["fatal", "error", "warn", "info", "debug", "trace"]);

/**
 * The handler's `ctx.logger`: the run's pino child, unchanged for the log, whose lines (at the
 * levels the logger writes) are also kept in the attempt's journal for the run record. Children
 * the handler makes capture too.
 */
export function capturingLogger(logger: Logger, journal: LineSink): Logger {
  return new Proxy(logger, {
    get(target, property) {
      if (typeof property === "string" && LEVELS.has(property)) {
        const method = (target as unknown as Record<string, (...args: unknown[]) => void>)[property];
        return (...args: unknown[]) => {
          if (target.isLevelEnabled(property)) {
            try {
              const { msg, data } = lineOf(args);
              journal.record(property, msg, data);
            } catch {
              // capture must never break the handler's logging
            }
          }
          return method?.apply(target, args);
        };
      }
      if (property === "child") {
        return (...args: Parameters<Logger["child"]>) =>
          capturingLogger(target.child(...args) as unknown as Logger, journal);
      }
      const value: unknown = Reflect.get(target, property, target);
      return typeof value === "function" ? value.bind(target) : value;
    },
  });
}

/** pino's call shapes: (msg, ...args), (obj, msg?, ...args), (error, msg?). */
function lineOf(args: unknown[]): { msg: string; data?: Record<string, unknown> } {
  const [first, ...rest] = args;
  if (typeof first === "string") return { msg: format(first, ...rest) };
  if (first instanceof Error) {
    const [msg, ...more] = rest;
    return { msg: typeof msg === "string" ? format(msg, ...more) : first.message, data: { err: first } };
  }
  if (typeof first === "object" && first !== null) {
    const [msg, ...more] = rest;
    const { msg: ownMsg, ...data } = first as Record<string, unknown>;
    const text = typeof msg === "string" ? format(msg, ...more) : typeof ownMsg === "string" ? ownMsg : "";
    return { msg: text, data };
  }
  return { msg: first === undefined ? "" : String(first) };
}

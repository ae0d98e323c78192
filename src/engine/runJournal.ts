import type { Clock } from "../core/clock.js";
import { redactSecrets } from "../observability/redact.js";
import type { RunLogMeta } from "./runLogMeta.js";

/**
 * The lines a handler logs through `ctx.logger` during one attempt, kept with its run record
 * (the `meta.logs` of the attempt's `success`/`fail`/`retry` row in agenda_logs), redacted and
 * bounded: at most MAX_LINES lines and MAX_BYTES of text per attempt, each line cut at
 * MAX_LINE_CHARS; what is left out is counted in `meta.logsDropped`.
 */
export const RUN_LOG_MAX_LINES = 200;
export const RUN_LOG_MAX_BYTES = 64 * 1024;
export const RUN_LOG_MAX_LINE_CHARS = 4 * 1024;
/** An error's stack kept with a failed attempt, at most this long. */
export const RUN_ERROR_STACK_MAX_CHARS = 16 * 1024;

export interface RunLogLine {
  /** ISO time the line was logged. */
  at: string;
  level: string;
  msg: string;
  /** The line's other fields as JSON text (redacted), when it had any. */
  data?: string;
}

export class RunJournal {
  readonly lines: RunLogLine[] = [];
  dropped = 0;
  #bytes = 0;
  readonly #clock: Pick<Clock, "now">;

  /** `clock` stamps each line (src/core/clock.ts). */
  constructor(clock: Pick<Clock, "now">) {
    this.#clock = clock;
  }

  record(level: string, msg: string, data?: Record<string, unknown>): void {
    if (this.lines.length >= RUN_LOG_MAX_LINES) {
      this.dropped += 1;
      return;
    }
    const line: RunLogLine = {
      at: new Date(this.#clock.now()).toISOString(),
      level,
      msg: clip(redactSecrets(msg)),
    };
    const json = data && Object.keys(data).length > 0 ? safeJson(data) : undefined;
    if (json !== undefined) line.data = clip(redactSecrets(json));
    const size = line.msg.length + (line.data?.length ?? 0) + 40;
    if (this.#bytes + size > RUN_LOG_MAX_BYTES) {
      this.dropped += 1;
      return;
    }
    this.#bytes += size;
    this.lines.push(line);
  }
}

/** The run-record fields of one attempt: its log lines and, for a failure, the error's stack. */
export function journalMeta(
  journal: RunJournal | undefined,
  error: Error | undefined,
): Pick<RunLogMeta, "logs" | "logsDropped" | "errorStack"> {
  const meta: Pick<RunLogMeta, "logs" | "logsDropped" | "errorStack"> = {};
  if (journal && journal.lines.length > 0) meta.logs = journal.lines;
  if (journal && journal.dropped > 0) meta.logsDropped = journal.dropped;
  if (error?.stack) meta.errorStack = redactSecrets(error.stack).slice(0, RUN_ERROR_STACK_MAX_CHARS);
  return meta;
}

function clip(text: string): string {
  return text.length > RUN_LOG_MAX_LINE_CHARS ? `${text.slice(0, RUN_LOG_MAX_LINE_CHARS)}… (cut)` : text;
}

function safeJson(data: Record<string, unknown>): string | undefined {
  try {
    return JSON.stringify(data, (_key, value: unknown) =>
      value instanceof Error ? { type: value.name, message: value.message, stack: value.stack } : value,
    );
  } catch {
    return "[unserialisable fields]";
  }
}

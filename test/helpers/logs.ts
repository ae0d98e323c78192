import { Writable } from "node:stream";
import { createLogger, type Logger } from "../../src/index.js";
import { pollUntil } from "./poll.js";

export type LogLine = Record<string, unknown> & { msg?: string; level?: number };

/** A logger whose JSON lines a test can read and wait for. */
export class LogCapture {
  readonly lines: LogLine[] = [];
  readonly logger: Logger;

  constructor(level = "debug") {
    const sink = new Writable({
      write: (chunk: Buffer, _encoding, callback) => {
        for (const text of chunk.toString("utf8").split("\n")) {
          if (text.trim()) this.lines.push(JSON.parse(text) as LogLine);
        }
        callback();
      },
    });
    this.logger = createLogger({ level, destination: sink });
  }

  find(predicate: (line: LogLine) => boolean): LogLine | undefined {
    return this.lines.find(predicate);
  }

  waitFor(what: string, predicate: (line: LogLine) => boolean, timeoutMs = 20_000): Promise<LogLine> {
    return pollUntil(what, () => this.find(predicate), { timeoutMs, intervalMs: 20 });
  }

  messages(): string[] {
    return this.lines.map((line) => String(line.msg));
  }
}

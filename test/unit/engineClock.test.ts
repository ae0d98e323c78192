import { readdirSync, readFileSync } from "node:fs";
import path from "node:path";
import { describe, expect, it } from "vitest";

/**
 * src/engine/ reads no clock of its own (src/core/clock.ts): every time it reads and every timer
 * it sets go through the Clock it is handed, so that tests drive time (test/helpers/testClock.ts).
 */
const ENGINE = path.join(import.meta.dirname, "../../src/engine");
const DIRECT = /\bDate\.now\(|new Date\(\)|performance\.now\(|(?<![.\w])set(?:Timeout|Interval)\(/;
/** The notification channel's reconnect timer is a field of its parent class in @agendajs/postgres-backend. */
const ALLOWED = new Set(["notificationChannel.ts"]);

function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) =>
    entry.isDirectory()
      ? sources(path.join(dir, entry.name))
      : entry.name.endsWith(".ts")
        ? [path.join(dir, entry.name)]
        : [],
  );
}

describe("the engine's clock", () => {
  it("no file in src/engine/ reads the time or sets a timer but through its Clock", () => {
    const found = sources(ENGINE)
      .filter((file) => !ALLOWED.has(path.basename(file)))
      .flatMap((file) =>
        readFileSync(file, "utf8")
          .split("\n")
          .map((line, index) => ({ line: line.trim(), at: `${path.relative(ENGINE, file)}:${index + 1}` }))
          .filter(({ line }) => !line.startsWith("//") && !line.startsWith("*") && DIRECT.test(line))
          .map(({ line, at }) => `${at}: ${line}`),
      );
    expect(found).toEqual([]);
  });
});

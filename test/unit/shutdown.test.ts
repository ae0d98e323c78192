import { Writable } from "node:stream";
import { afterEach, describe, expect, it } from "vitest";
import { createLogger } from "../../src/core/logger.js";
import { handleShutdownSignals, REPEATED_SIGNAL_MS } from "../../src/scheduler/shutdown.js";

describe("handleShutdownSignals", () => {
  let remove: (() => void) | undefined;
  afterEach(() => remove?.());

  function harness(beforeExitAtOnce?: () => void) {
    const lines: string[] = [];
    const logger = createLogger({
      level: "debug",
      destination: new Writable({
        write(chunk: Buffer, _encoding, done) {
          lines.push(JSON.parse(chunk.toString()).msg as string);
          done();
        },
      }),
    });
    let clock = 0;
    const exits: number[] = [];
    const shutdowns: string[] = [];
    remove = handleShutdownSignals({
      logger,
      exit: (code) => exits.push(code),
      beforeExitAtOnce,
      now: () => clock,
      // a drain that does not end within the test
      shutdown: async (signal) => {
        shutdowns.push(signal);
        await new Promise(() => {});
      },
    });
    return { lines, exits, shutdowns, advance: (ms: number) => (clock += ms) };
  }

  it("takes a repeat within REPEATED_SIGNAL_MS as the same request (npm forwards Ctrl-C too): the drain goes on", () => {
    const h = harness();
    process.emit("SIGINT", "SIGINT");
    h.advance(2);
    process.emit("SIGINT", "SIGINT");
    h.advance(REPEATED_SIGNAL_MS - 10);
    process.emit("SIGTERM", "SIGTERM");
    expect(h.shutdowns).toEqual(["SIGINT"]);
    expect(h.exits).toEqual([]);
    expect(h.lines.filter((line) => line.includes("taken as the same request"))).toHaveLength(2);
  });

  it("exits at once on a second signal sent later", () => {
    const h = harness();
    process.emit("SIGTERM", "SIGTERM");
    h.advance(REPEATED_SIGNAL_MS);
    process.emit("SIGTERM", "SIGTERM");
    expect(h.shutdowns).toEqual(["SIGTERM"]);
    expect(h.exits).toEqual([130]);
    expect(h.lines).toContain("second SIGTERM: exiting at once without waiting for running tasks");
  });

  it("runs beforeExitAtOnce just before exiting at once, and exits even when it throws", () => {
    const calls: string[] = [];
    const h = harness(() => {
      calls.push(`exits so far: ${h.exits.length}`);
      throw new Error("no server");
    });
    process.emit("SIGTERM", "SIGTERM");
    expect(calls).toEqual([]); // the first signal drains: nothing is cut short
    h.advance(REPEATED_SIGNAL_MS);
    process.emit("SIGTERM", "SIGTERM");
    expect(calls).toEqual(["exits so far: 0"]);
    expect(h.exits).toEqual([130]);
    expect(h.lines).toContain("clean-up before exiting at once failed");
  });
});

import { Writable } from "node:stream";
import pg from "pg";
import { afterEach, describe, expect, it } from "vitest";
import { systemClock } from "../../src/core/clock.js";
import { createLogger } from "../../src/core/logger.js";
import { DatabaseHealth } from "../../src/engine/databaseHealth.js";

/** DatabaseHealth against a port nothing listens on (a real connection attempt, refused at once). */

const pools: pg.Pool[] = [];
afterEach(async () => {
  await Promise.all(pools.splice(0).map((pool) => pool.end()));
});

function health(): { health: DatabaseHealth; lines: string[] } {
  const lines: string[] = [];
  const destination = new Writable({
    write(chunk, _encoding, done) {
      lines.push(String(chunk));
      done();
    },
  });
  const pool = new pg.Pool({ host: "127.0.0.1", port: 1, connectionTimeoutMillis: 2_000 });
  pools.push(pool);
  const logger = createLogger({ level: "info", destination });
  return { health: new DatabaseHealth({ pool, logger, probeEveryMs: 60_000, clock: systemClock }), lines };
}

describe("DatabaseHealth", () => {
  it("a probe of an unreachable database says so, once", async () => {
    const { health: probed, lines } = health();
    probed.start();
    expect(await probed.probe()).toBe(false);
    expect(await probed.probe()).toBe(false);
    await probed.stop();
    expect(lines.filter((line) => line.includes("database unreachable"))).toHaveLength(1);
  });

  it("after stop() a probe asks nothing and logs nothing (the caller may have ended its pool)", async () => {
    const { health: stopped, lines } = health();
    stopped.start();
    await stopped.stop();
    expect(await stopped.probe()).toBe(true);
    expect(lines.filter((line) => line.includes("database unreachable"))).toHaveLength(0);
  });
});

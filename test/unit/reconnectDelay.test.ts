import { describe, expect, it } from "vitest";
import { reconnectDelayMs } from "../../src/engine/notificationChannel.js";

describe("reconnectDelayMs", () => {
  it("doubles from the initial delay with each failure since the last connect", () => {
    expect([0, 1, 2, 3, 4].map((failures) => reconnectDelayMs(failures, 100, 5_000))).toEqual([
      100, 200, 400, 800, 1_600,
    ]);
  });

  it("never waits longer than the most", () => {
    expect(reconnectDelayMs(6, 100, 5_000)).toBe(5_000);
    expect(reconnectDelayMs(1_000_000, 100, 5_000)).toBe(5_000);
    expect(reconnectDelayMs(0, 100, 50)).toBe(50);
  });
});

import { describe, expect, it } from "vitest";
import { poolingModeOf } from "../../src/engine/sessionPooling.js";

describe("poolingModeOf", () => {
  it("session: in every round A kept its server and B had another", () => {
    expect(
      poolingModeOf([
        { aBefore: 10, b: 11, aAfter: 10 },
        { aBefore: 10, b: 12, aAfter: 10 },
      ]),
    ).toBe("session");
  });

  it("transaction: B was handed the server A had just used", () => {
    expect(
      poolingModeOf([
        { aBefore: 10, b: 11, aAfter: 10 },
        { aBefore: 10, b: 10, aAfter: 11 },
      ]),
    ).toBe("transaction");
  });

  it("transaction: A's next statement ran on another server, B's being elsewhere", () => {
    expect(poolingModeOf([{ aBefore: 10, b: 11, aAfter: 12 }])).toBe("transaction");
  });
});

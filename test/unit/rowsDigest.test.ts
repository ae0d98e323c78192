import { describe, expect, it } from "vitest";
import { replaceRows } from "../../src/reconcile/rowsDigest.js";

describe("replaceRows: the rows' digest with some rows as they were (src/reconcile/rowsDigest.ts)", () => {
  it("takes the rows as they are out of the sums and puts them back as they were", () => {
    // three rows a, b, c with hashes (1, 10), (2, 20), (3, 30); b became (-5, 7)
    const after = "3:-2:47";
    expect(replaceRows(after, "1:-5:7", "1:2:20")).toBe("3:5:60");
    // a row that did not exist before: the count goes down too
    expect(replaceRows("4:9223372036854775807:1", "1:9223372036854775800:0", "0:0:0")).toBe("3:7:1");
  });

  it("answers nothing for a digest it cannot read", () => {
    expect(replaceRows("3:abc:1", "1:1:1", "1:1:1")).toBeUndefined();
    expect(replaceRows("3:1", "1:1:1", "1:1:1")).toBeUndefined();
    expect(replaceRows("3:1:1", "1:1:1", "")).toBeUndefined();
  });
});

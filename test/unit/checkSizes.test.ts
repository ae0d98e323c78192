import { describe, expect, it } from "vitest";
import { functionSizes, MAX_FUNCTION_LINES } from "../../scripts/checkSizes.js";

/** The size checker of `npm run lint` (scripts/checkSizes.ts) measures what it says, on literal sources. */
describe("checkSizes: functionSizes", () => {
  it("measures each function from its first line to its last, named as a reader finds it", () => {
    const source = [
      "export function plain(a: number) {", // 1
      "  return a;",
      "}", // 3
      "class Owner {",
      "  method() {", // 5
      "    const inner = () => {", // 6
      "      return 1;",
      "    };", // 8
      "    return inner();",
      "  }", // 10
      "}",
      "const assigned = function () {}; // 12",
    ].join("\n");
    expect(functionSizes("x.ts", source)).toEqual([
      { name: "plain", lines: 3 },
      { name: "Owner.method", lines: 6 },
      { name: "inner", lines: 3 },
      { name: "assigned", lines: 1 },
    ]);
  });

  it("counts a function one line over the limit as over it", () => {
    const body = Array.from({ length: MAX_FUNCTION_LINES - 1 }, (_, i) => `  const v${i} = ${i};`);
    const source = ["function long() {", ...body, "}"].join("\n");
    expect(functionSizes("x.ts", source)).toEqual([{ name: "long", lines: MAX_FUNCTION_LINES + 1 }]);
  });
});

import { describe, expect, it } from "vitest";
import type { DesiredState, DesiredTask } from "../../src/config/desiredState.js";
import { checkFleetGuard, closestName } from "../../src/config/fleetGuard.js";
import { checkDocumentStructure } from "../../src/sources/documentLimits.js";
import { parseDocument } from "../../src/sources/parseDocument.js";

const deepYaml = (levels: number) =>
  `tasks:\n${Array.from({ length: levels }, (_, i) => `${" ".repeat(i + 2)}- `).join("\n")}x\n`;

describe("config document limits", () => {
  it("refuses deep nesting before any parser runs, for YAML and JSON alike", () => {
    expect(() => parseDocument(deepYaml(1000), ["yaml"])).toThrow(
      /^document refused before parsing: it is nested more than 64 levels deep \(level 65 at line \d+\)/,
    );
    const deepJson = `${"[".repeat(21_000)}${"]".repeat(21_000)}`;
    expect(() => parseDocument(deepJson, ["json", "yaml"])).toThrow(
      /nested more than 64 levels deep \(level 65 at line 1\)/,
    );
    expect(() => parseDocument(`{"tasks": ${'{"a": '.repeat(100)}1${"}".repeat(100)}}`, ["yaml"])).toThrow(
      /nested more than 64 levels/,
    );
    expect(() =>
      parseDocument(
        "- - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - x",
        ["yaml"],
      ),
    ).toThrow(/nested more than 64 levels/);
  });

  it("refuses more items than a config holds (300,000 flow items took 6 s to parse)", () => {
    expect(() => parseDocument(`[${Array(300_000).fill("1").join(",")}]`, ["yaml"])).toThrow(
      /has more than 120000 items and keys/,
    );
  });

  it("lets real documents through: comments, quotes with brackets, block scalars, flow entries, 10,000 tasks", () => {
    const text = [
      "# the tasks",
      "tasks:",
      "  - name: report # inline comment with [ and {",
      "    enabled: true",
      '    cron: "*/5 * * * *"',
      "    note: it's [ fine",
      "    text: |",
      "      {{{{{{{{ [[[[[[[[[[[[",
      "          - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - -",
      "  - { name: cleanup, enabled: false, cron: '0 3 * * *', timezone: 'Asia/Shanghai' }",
      "confirmDisableAll: false",
    ].join("\n");
    expect(parseDocument(text, ["yaml"])).toMatchObject({
      tasks: [
        { name: "report", note: "it's [ fine" },
        { name: "cleanup", timezone: "Asia/Shanghai" },
      ],
    });
    const many = `tasks:\n${Array.from({ length: 10_000 }, (_, i) => `  - name: t${i}\n    enabled: true\n    cron: "* * * * *"\n    timezone: UTC\n`).join("")}`;
    expect(() => checkDocumentStructure(many)).not.toThrow();
    expect(() => checkDocumentStructure(JSON.stringify(parseDocument(many, ["yaml"])))).not.toThrow();
  });

  it("gives JSON errors a line and column, with or without V8's offset", () => {
    expect(() => parseDocument('{\n "tasks": [\n  1,\n ]\n}', ["json"])).toThrow(
      /^not valid JSON: Unexpected token '\]' \(line 4, column 2\)$/,
    );
    expect(() => parseDocument('{\n "tasks": [],\n}', ["json"])).toThrow(/\(line 3, column 1\)$/);
    expect(() => parseDocument('{"tasks":\n [', ["json"])).toThrow(
      /Unexpected end of JSON input \(line 2, column 3\)$/,
    );
  });
});

const state = (names: string[], confirmDisableAll = false): DesiredState => ({
  tasks: names.map((name): DesiredTask => ({ name, enabled: true, cron: "* * * * *", timezone: "UTC" })),
  rejected: [],
  source: "file tasks.yaml",
  revision: "r2",
  document: null,
  confirmDisableAll,
});
const guard = (snapshot: DesiredState, enabled: string[], registered = enabled, share = 0.5) =>
  checkFleetGuard(snapshot, {
    enabledNow: new Set(enabled),
    registered: new Set(registered),
    maxDisableShare: share,
  });

describe("the fleet guard", () => {
  it("refuses a one-entry typo that would disable the only task, naming it and the likely name", () => {
    expect(guard(state(["Quick"]), ["quick"])).toBe(
      'config from file tasks.yaml (revision r2) is refused: it leaves out every enabled task (1), which would disable "quick". "Quick" is not a registered task: did you mean "quick"? Fix the names, or set enabled: false on the tasks to turn off; if disabling them all is meant, add "confirmDisableAll": true to the document',
    );
  });

  it("refuses leaving out more than the share; allows up to it, explicit disables, and confirmDisableAll", () => {
    const five = ["a1", "a2", "a3", "a4", "a5"];
    expect(guard(state(["a1", "a2"]), five)).toMatch(
      /leaves out 3 of the 5 enabled tasks \(more than 50%\), which would disable "a3", "a4", "a5"\./,
    );
    expect(guard(state(["a1", "a2", "a3"]), five)).toBeUndefined();
    expect(guard(state(["a1"]), five, five, 1)).toBeUndefined(); // share 1: only the all-tasks rule
    expect(guard(state([]), five, five, 1)).toMatch(/every enabled task \(5\)/);
    const explicit = state(five);
    for (const task of explicit.tasks.slice(1)) task.enabled = false;
    expect(guard(explicit, five)).toBeUndefined();
    expect(guard(state(["a1"], true), five)).toBeUndefined();
    // tasks that are not enabled, or not registered, do not count
    expect(guard(state(["a1"]), ["a1"], [...five, "gone"])).toBeUndefined();
  });

  it("lists at most 10 names, then how many more", () => {
    const many = Array.from({ length: 30 }, (_, i) => `task${String(i).padStart(2, "0")}`);
    expect(guard(state([]), many)).toMatch(/"task09" and 20 more\./);
  });

  it("suggests registered names one or two edits away, or differing in case", () => {
    const registered = ["syncReport", "cleanup", "quick"];
    expect(closestName("SyncReport", registered)).toBe("syncReport");
    expect(closestName("clenup", registered)).toBe("cleanup");
    expect(closestName("quik", registered)).toBe("quick");
    expect(closestName("somethingElse", registered)).toBeUndefined();
  });
});

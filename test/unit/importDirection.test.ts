import { readdirSync, readFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";

/**
 * The dependency direction of src/ (docs/design.md, "Layout"): each folder (or top-level file) of
 * src/ sits on one row; a file imports from its own folder and from rows below its own, never from
 * its own row's other folders or from a row above.
 */
const ROWS: readonly (readonly string[])[] = [
  ["observability", "version.ts"],
  ["core"],
  ["sources", "store", "infra", "db"],
  ["config", "engine"],
  ["reconcile", "status", "isolation", "dependencies", "operations", "sharding"],
  ["scheduler", "dashboard"],
  ["alerts"],
  ["admin", "metrics"],
  ["serve"],
  ["cli", "index.ts"],
];

const srcDir = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../src");

/**
 * Of engine/, status/ (the read models) reads only the shapes and the SQL: the row shapes the engine
 * declares for the layers above, the run-log row codec, and its statements and table names. The run
 * path (claim, run, recording, liveness) stays the engine's own. engine/ never imports status/ (the
 * rows say so too; this says it whatever the rows become).
 */
const STATUS_MAY_READ_OF_ENGINE: readonly string[] = [
  "engine/engineApi.ts",
  "engine/runLogMeta.ts",
  "engine/sql.ts",
  "engine/sql/",
];

/** The row of a folder or top-level file of src/, or undefined when the table does not place it. */
function rowOf(unit: string): number | undefined {
  const row = ROWS.findIndex((units) => units.includes(unit));
  return row < 0 ? undefined : row;
}

/** The folder (or the top-level file) of src/ that a path inside src/ belongs to. */
function unitOf(file: string): string {
  const unit = path.relative(srcDir, file).split(path.sep)[0] as string;
  return unit.replace(/\.js$/, ".ts");
}

/** Every module specifier of a TypeScript file: static imports and re-exports, `import("...")`. */
function specifiersOf(source: string): string[] {
  const found: string[] = [];
  const patterns = [
    /^\s*(?:import|export)\s[^;]*?\sfrom\s*["']([^"']+)["']/gms,
    /^\s*import\s*["']([^"']+)["']/gm,
    /\bimport\s*\(\s*["']([^"']+)["']\s*\)/g,
  ];
  for (const pattern of patterns) {
    for (const match of source.matchAll(pattern)) found.push(match[1] as string);
  }
  return found;
}

/** The imports of `file` (inside src/) that run against the direction, as "from -> to" lines. */
function wrongImports(file: string, source: string): string[] {
  const fromUnit = unitOf(file);
  const fromRow = rowOf(fromUnit);
  if (fromRow === undefined) return [`${path.relative(srcDir, file)}: src/${fromUnit} has no row in ROWS`];
  const wrong: string[] = [];
  for (const specifier of specifiersOf(source)) {
    if (!specifier.startsWith(".")) continue;
    const target = path.resolve(path.dirname(file), specifier);
    if (!target.startsWith(`${srcDir}${path.sep}`)) continue;
    const toUnit = unitOf(target);
    if (toUnit === fromUnit) continue;
    const toRow = rowOf(toUnit);
    if (toRow === undefined || toRow >= fromRow) {
      wrong.push(`${path.relative(srcDir, file)} -> ${path.relative(srcDir, target)}`);
    }
  }
  return wrong;
}

/** The imports between engine/ and status/ that the rule above forbids, as "from -> to" lines. */
function wrongEngineStatusImports(file: string, source: string): string[] {
  const fromUnit = unitOf(file);
  if (fromUnit !== "engine" && fromUnit !== "status") return [];
  const wrong: string[] = [];
  for (const specifier of specifiersOf(source)) {
    if (!specifier.startsWith(".")) continue;
    const target = path.resolve(path.dirname(file), specifier).replace(/\.js$/, ".ts");
    const relative = path.relative(srcDir, target).split(path.sep).join("/");
    const toUnit = unitOf(target);
    const allowed =
      fromUnit === "engine"
        ? toUnit !== "status"
        : toUnit !== "engine" ||
          STATUS_MAY_READ_OF_ENGINE.some((prefix) =>
            prefix.endsWith("/") ? relative.startsWith(prefix) : relative === prefix,
          );
    if (!allowed) wrong.push(`${path.relative(srcDir, file)} -> ${path.relative(srcDir, target)}`);
  }
  return wrong;
}

function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const full = path.join(dir, entry.name);
    if (entry.isDirectory()) return sourceFiles(full);
    return entry.name.endsWith(".ts") ? [full] : [];
  });
}

describe("import direction (docs/design.md, Layout)", () => {
  it("no file in src/ imports from its own row's other folders or from a row above", () => {
    const files = sourceFiles(srcDir);
    expect(files.length).toBeGreaterThan(50);
    const wrong = files.flatMap((file) => wrongImports(file, readFileSync(file, "utf8")));
    expect(wrong).toEqual([]);
  });

  it("engine/ never imports status/; status/ reads of engine/ only its shapes, run-log codec and SQL", () => {
    const files = sourceFiles(path.join(srcDir, "engine")).concat(sourceFiles(path.join(srcDir, "status")));
    expect(files.some((file) => unitOf(file) === "status")).toBe(true);
    const wrong = files.flatMap((file) => wrongEngineStatusImports(file, readFileSync(file, "utf8")));
    expect(wrong).toEqual([]);
  });

  it("flags engine/ importing status/ and status/ importing the run path", () => {
    const engineFile = path.join(srcDir, "engine", "example.ts");
    expect(
      wrongEngineStatusImports(
        engineFile,
        ['import { readTimeline } from "../status/timeline.js";', 'import * as sql from "./sql.js";'].join(
          "\n",
        ),
      ),
    ).toEqual(["engine/example.ts -> status/timeline.ts"]);
    const statusFile = path.join(srcDir, "status", "example.ts");
    const source = [
      'import type { TaskJob } from "../engine/engineApi.js";',
      'import { metaText } from "../engine/runLogMeta.js";',
      'import { LOGS_TABLE } from "../engine/sql.js";',
      'import { selectRuns } from "../engine/sql/runLog.js";',
      'import { TaskRunner } from "../engine/taskRunner.js";',
      'import { scheduleOf } from "../core/policies/schedule.js";',
    ].join("\n");
    expect(wrongEngineStatusImports(statusFile, source)).toEqual([
      "status/example.ts -> engine/taskRunner.ts",
    ]);
  });

  it("places every folder of src/ on a row", () => {
    const units = readdirSync(srcDir).filter((name) => !name.endsWith(".d.ts"));
    expect(units.filter((unit) => rowOf(unit) === undefined)).toEqual([]);
  });

  it("flags an import that runs up, one across a row, and reads every import form", () => {
    const engineFile = path.join(srcDir, "engine", "example.ts");
    const source = [
      'import type { LiveJob } from "../reconcile/reconcilePlan.js";',
      "import {",
      "  type Scheduler,",
      '} from "../scheduler/scheduler.js";',
      'export { parseDesiredState } from "../config/desiredState.js";',
      'const late = await import("../status/statusModel.js");',
      'import { toError } from "../core/logger.js";',
      'import * as sql from "./sql.js";',
      'import { Agenda } from "agenda";',
    ].join("\n");
    expect(wrongImports(engineFile, source)).toEqual([
      "engine/example.ts -> reconcile/reconcilePlan.js",
      "engine/example.ts -> scheduler/scheduler.js",
      "engine/example.ts -> config/desiredState.js",
      "engine/example.ts -> status/statusModel.js",
    ]);
  });
});

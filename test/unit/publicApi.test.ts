import { readFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import ts from "typescript";
import { describe, expect, it } from "vitest";

/**
 * The package's exports and docs/api.md name the same things (docs/api.md, top). The exports are
 * read from src/index.ts with the TypeScript compiler, values and types alike, `export *` and
 * `export type *` resolved through the modules they name; docs/api.md names an export by a list
 * item that starts with it in backticks: "- `createScheduler(options)`: ...".
 */

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
const indexFile = path.join(root, "src/index.ts");

interface Export {
  name: string;
  kind: "value" | "type";
}

function packageExports(): Export[] {
  const { config } = ts.readConfigFile(path.join(root, "tsconfig.json"), ts.sys.readFile);
  const { options } = ts.parseJsonConfigFileContent(config, ts.sys, root);
  const program = ts.createProgram([indexFile], { ...options, noEmit: true });
  const checker = program.getTypeChecker();
  const source = program.getSourceFile(indexFile);
  const module = source && checker.getSymbolAtLocation(source);
  if (!module) throw new Error(`cannot read the exports of ${indexFile}`);
  return checker.getExportsOfModule(module).map((symbol) => {
    const target = symbol.flags & ts.SymbolFlags.Alias ? checker.getAliasedSymbol(symbol) : symbol;
    return { name: symbol.name, kind: target.flags & ts.SymbolFlags.Value ? "value" : "type" };
  });
}

function documentedNames(): string[] {
  const text = readFileSync(path.join(root, "docs/api.md"), "utf8");
  return [...text.matchAll(/^[-*] `([A-Za-z_$][\w$]*)/gm)].map((match) => match[1] as string);
}

const exported = packageExports();
const documented = documentedNames();

describe("the public API (src/index.ts) and docs/api.md", () => {
  it("reads a plausible set of exports", () => {
    const names = exported.map((entry) => entry.name);
    expect(names).toEqual(
      expect.arrayContaining(["createScheduler", "Scheduler", "runService", "TaskContext"]),
    );
    expect(exported.find((entry) => entry.name === "createScheduler")?.kind).toBe("value");
    expect(exported.find((entry) => entry.name === "TaskContext")?.kind).toBe("type");
  });

  it("every export is named in docs/api.md", () => {
    const missing = exported
      .filter((entry) => !documented.includes(entry.name))
      .map((entry) => `${entry.name} (${entry.kind})`);
    expect(missing, "exported by src/index.ts but not listed in docs/api.md").toEqual([]);
  });

  it("every name docs/api.md lists is exported, once", () => {
    const names = new Set(exported.map((entry) => entry.name));
    expect(
      documented.filter((name) => !names.has(name)),
      "listed in docs/api.md but not exported by src/index.ts",
    ).toEqual([]);
    expect(documented.filter((name, index) => documented.indexOf(name) !== index)).toEqual([]);
  });

  it("the README's API section links docs/api.md", () => {
    const readme = readFileSync(path.join(root, "README.md"), "utf8");
    const section = readme.split(/^## /m).find((part) => part.startsWith("Public API"));
    expect(section).toContain("(docs/api.md)");
  });
});

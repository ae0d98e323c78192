/**
 * The size limits of src/ (docs/design.md, "Size limits"): no TypeScript file over MAX_FILE_LINES
 * lines and no function over MAX_FUNCTION_LINES, so that a file reads as one role and a function
 * as one step. A function is any function, method, constructor, accessor or arrow function,
 * measured from its first line to its last, nested functions included. Exits 1 and lists the
 * offenders when any is over; run by `npm run lint`.
 *
 *   node --import tsx scripts/checkSizes.ts [--all]   (--all: also list the largest within limits)
 */
import { readdirSync, readFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import ts from "typescript";

export const MAX_FILE_LINES = 450;
export const MAX_FUNCTION_LINES = 80;

/**
 * Over the limit for a reason stated here. A table of data (a list of records, not of steps)
 * may be long; anything else here says who removes it and when.
 */
const ALLOWED: Record<string, string> = {
  "src/metrics/definitions.ts#defineMetrics": "a table of data: one record per metric",
};

export interface Oversize {
  /** `file` or `file#Owner.name`. */
  where: string;
  lines: number;
  limit: number;
}

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");

function tsFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const full = path.join(dir, entry.name);
    if (entry.isDirectory()) return tsFiles(full);
    return entry.name.endsWith(".ts") && !entry.name.endsWith(".d.ts") ? [full] : [];
  });
}

function lineCount(text: string): number {
  return text.endsWith("\n") ? text.split("\n").length - 1 : text.split("\n").length;
}

/** The name a reader finds a function by: `Class.method`, `name`, or the variable or property it is assigned to. */
function functionName(node: ts.Node, source: ts.SourceFile): string {
  const named = (node as { name?: ts.Node }).name;
  let name = named ? named.getText(source) : undefined;
  if (ts.isConstructorDeclaration(node)) name = "constructor";
  const parent = node.parent;
  if (!name && parent && (ts.isVariableDeclaration(parent) || ts.isPropertyAssignment(parent)))
    name = parent.name.getText(source);
  if (!name && parent && ts.isPropertyDeclaration(parent)) name = parent.name.getText(source);
  if (!name)
    name = `(anonymous, line ${source.getLineAndCharacterOfPosition(node.getStart(source)).line + 1})`;
  const owner = ts.isClassLike(node.parent) ? node.parent.name?.getText(source) : undefined;
  return owner ? `${owner}.${name}` : name;
}

function isFunction(node: ts.Node): node is ts.FunctionLikeDeclaration {
  return (
    ts.isFunctionDeclaration(node) ||
    ts.isMethodDeclaration(node) ||
    ts.isConstructorDeclaration(node) ||
    ts.isGetAccessorDeclaration(node) ||
    ts.isSetAccessorDeclaration(node) ||
    ts.isArrowFunction(node) ||
    ts.isFunctionExpression(node)
  );
}

/** Every function of a file with its length in lines. */
export function functionSizes(file: string, text: string): { name: string; lines: number }[] {
  const source = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, true);
  const sizes: { name: string; lines: number }[] = [];
  const visit = (node: ts.Node) => {
    if (isFunction(node) && node.body) {
      const first = source.getLineAndCharacterOfPosition(node.getStart(source)).line;
      const last = source.getLineAndCharacterOfPosition(node.getEnd()).line;
      sizes.push({ name: functionName(node, source), lines: last - first + 1 });
    }
    ts.forEachChild(node, visit);
  };
  visit(source);
  return sizes;
}

/** Everything in src/ over a limit, allowed or not. */
export function oversizes(): Oversize[] {
  const found: Oversize[] = [];
  for (const full of tsFiles(path.join(root, "src"))) {
    const file = path.relative(root, full).split(path.sep).join("/");
    const text = readFileSync(full, "utf8");
    const lines = lineCount(text);
    if (lines > MAX_FILE_LINES) found.push({ where: file, lines, limit: MAX_FILE_LINES });
    for (const fn of functionSizes(file, text))
      if (fn.lines > MAX_FUNCTION_LINES)
        found.push({ where: `${file}#${fn.name}`, lines: fn.lines, limit: MAX_FUNCTION_LINES });
  }
  return found.sort((a, b) => b.lines / b.limit - a.lines / a.limit);
}

function main(): void {
  const found = oversizes();
  const refused = found.filter((each) => !(each.where in ALLOWED));
  for (const each of found.filter((entry) => entry.where in ALLOWED))
    console.log(`allowed: ${each.where}: ${each.lines} lines (limit ${each.limit}): ${ALLOWED[each.where]}`);
  for (const where of Object.keys(ALLOWED))
    if (!found.some((each) => each.where === where))
      console.log(`${where} is within the limits now: remove it from ALLOWED in scripts/checkSizes.ts`);
  if (process.argv.includes("--all")) {
    const all = tsFiles(path.join(root, "src")).map((full) => ({
      file: path.relative(root, full),
      lines: lineCount(readFileSync(full, "utf8")),
    }));
    for (const each of all.sort((a, b) => b.lines - a.lines).slice(0, 10))
      console.log(`${each.lines}\t${each.file}`);
  }
  if (refused.length === 0) {
    console.log(
      `sizes: no file in src/ over ${MAX_FILE_LINES} lines, no function over ${MAX_FUNCTION_LINES}`,
    );
    return;
  }
  for (const each of refused)
    console.error(`${each.where}: ${each.lines} lines, over the limit of ${each.limit}: split it by role`);
  console.error(
    `${refused.length} over the size limits (scripts/checkSizes.ts; docs/design.md, "Size limits")`,
  );
  process.exitCode = 1;
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) main();

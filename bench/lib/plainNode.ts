/**
 * The memory figure is the compiled package's under plain `node` (no TypeScript loader, which alone
 * takes about 37 MB of RSS): `npm run build` makes dist/, and the two contender workers
 * (bench/workers/cronwarden.ts, agenda.ts, with the bench/lib files they import) are transpiled
 * to JavaScript in the bench's work dir. The cronwarden worker then imports dist/index.js instead of
 * the source; raw Agenda runs the same way, from its own compiled package.
 */
import { execFile } from "node:child_process";
import { mkdir, readFile, symlink, writeFile } from "node:fs/promises";
import path from "node:path";
import { pathToFileURL } from "node:url";
import { promisify } from "node:util";
import ts from "typescript";
import { repoRoot } from "./children.js";

export interface PlainNode {
  /** Where the transpiled workers are: `${dir}/workers/<name>.js`. */
  dir: string;
  /** file: URL of the compiled package's entry, for the cronwarden worker to import. */
  cronwardenEntry: string;
}

const FILES = [
  "workers/cronwarden.ts",
  "workers/agenda.ts",
  "workers/scale.ts",
  "lib/contenderWorker.ts",
  "lib/protocol.ts",
];

let prepared: Promise<PlainNode> | undefined;

/** Builds dist/ and transpiles the workers (once per bench run). */
export function preparePlainNode(workDir: string, progress: (message: string) => void): Promise<PlainNode> {
  prepared ??= (async () => {
    progress("building the package (npm run build -> dist/) for the plain-node workers");
    await promisify(execFile)(process.execPath, [path.join(repoRoot, "scripts", "build.mjs")], {
      cwd: repoRoot,
    });
    const dir = path.join(workDir, "plain-node");
    for (const file of FILES) {
      const source = await readFile(path.join(repoRoot, "bench", file), "utf8");
      const output = ts.transpileModule(source, {
        fileName: file,
        compilerOptions: {
          module: ts.ModuleKind.ESNext,
          target: ts.ScriptTarget.ES2023,
          verbatimModuleSyntax: true,
        },
      });
      const target = path.join(dir, file.replace(/\.ts$/, ".js"));
      await mkdir(path.dirname(target), { recursive: true });
      await writeFile(target, output.outputText);
    }
    await writeFile(path.join(dir, "package.json"), JSON.stringify({ type: "module" }));
    // bare imports (pg, agenda) resolve from the repository's node_modules
    await symlink(path.join(repoRoot, "node_modules"), path.join(dir, "node_modules"), "dir");
    return { dir, cronwardenEntry: pathToFileURL(path.join(repoRoot, "dist", "index.js")).href };
  })();
  return prepared;
}

#!/usr/bin/env node
// The cronwarden CLI: the compiled JavaScript in dist/ (npm run build; shipped in the package).
// tsx is registered only when a TypeScript module is named (--tasks / --tasks-module /
// CRONWARDEN_TASKS_MODULE) and tsx is installed; JavaScript task modules need nothing else.
import { existsSync } from "node:fs";

const typescript = /\.[cm]?tsx?$/;
const wantsTypeScript =
  process.argv.slice(2).some((arg) => typescript.test(arg)) ||
  typescript.test(process.env.CRONWARDEN_TASKS_MODULE ?? "");
const compiled = new URL("../dist/cli/run.js", import.meta.url);

let tsx = false;
if (wantsTypeScript || !existsSync(compiled)) {
  try {
    const { register } = await import("tsx/esm/api");
    register();
    tsx = true;
  } catch {
    // no tsx: the module import below names the fix
  }
}
if (existsSync(compiled)) {
  await import(compiled.href);
} else if (tsx) {
  await import("./cronwarden.ts");
} else {
  process.stderr.write("cronwarden: dist/ is missing: run `npm run build` in the package first\n");
  process.exitCode = 2;
}

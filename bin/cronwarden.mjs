#!/usr/bin/env node
// The cronwarden CLI: the compiled JavaScript in dist/ (npm run build; shipped in the package).
// When tsx is installed (this repository, or a project that uses it) it is registered first, so
// that --tasks / --tasks-module may name a TypeScript module; it is not needed otherwise.
import { existsSync } from "node:fs";

let tsx = false;
try {
  const { register } = await import("tsx/esm/api");
  register();
  tsx = true;
} catch {
  // no tsx: JavaScript task modules only
}
const compiled = new URL("../dist/cli/run.js", import.meta.url);
if (existsSync(compiled)) {
  await import(compiled.href);
} else if (tsx) {
  await import("./cronwarden.ts");
} else {
  process.stderr.write("cronwarden: dist/ is missing: run `npm run build` in the package first\n");
  process.exitCode = 2;
}

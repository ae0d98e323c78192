// Compiles src/ to dist/ (JavaScript + declarations) for consumers that run plain Node, and copies
// the dashboard's static assets next to the compiled routes that serve them, and the host script of
// isolated handlers (plain JavaScript: a worker or child loads it without a TypeScript loader).
import { execFileSync } from "node:child_process";
import { cpSync, rmSync } from "node:fs";
import { createRequire } from "node:module";

const require = createRequire(import.meta.url);
rmSync("dist", { recursive: true, force: true });
execFileSync(process.execPath, [require.resolve("typescript/bin/tsc"), "-p", "tsconfig.build.json"], {
  stdio: "inherit",
});
cpSync("src/dashboard/assets", "dist/dashboard/assets", { recursive: true });
cpSync("src/isolation/host.mjs", "dist/isolation/host.mjs");

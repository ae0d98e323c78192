// Compiles src/ to dist/ (JavaScript + declarations) for consumers that run plain Node, and copies
// the dashboard's static assets next to the compiled routes that serve them, and the plain-JavaScript
// thread entries (src/**/*.mjs, e.g. src/engine/lockKeeperThread.mjs) next to the modules that start them.
import { execFileSync } from "node:child_process";
import { cpSync, readdirSync, rmSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";

const require = createRequire(import.meta.url);
rmSync("dist", { recursive: true, force: true });
execFileSync(process.execPath, [require.resolve("typescript/bin/tsc"), "-p", "tsconfig.build.json"], {
  stdio: "inherit",
});
cpSync("src/dashboard/assets", "dist/dashboard/assets", { recursive: true });
for (const entry of readdirSync("src", { recursive: true })) {
  if (String(entry).endsWith(".mjs")) cpSync(path.join("src", entry), path.join("dist", entry));
}

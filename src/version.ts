import { readFileSync } from "node:fs";

/** The package's version, from its package.json (one level up from src/ and dist/). */
export function packageVersion(): string {
  try {
    const manifest = JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8")) as {
      version?: string;
    };
    return manifest.version ?? "unknown";
  } catch {
    return "unknown";
  }
}

import { createRequire } from "node:module";
import { isatty } from "node:tty";

interface DebugModule {
  inspectOpts: { colors?: unknown };
}

/**
 * Agenda creates `debug` loggers (`log.extend(...)`) as it goes, and `debug` asks
 * `isatty(stderr)` for each new logger unless DEBUG_COLORS was set: a system call each time. With
 * Agenda's job processor (no longer started: src/engine/claimLoop.ts) that was 40 % of the
 * process's CPU in a 1,000-task herd. The answer cannot change while the process runs,
 * so it is computed once here; an explicit DEBUG_COLORS keeps its meaning.
 */
export function cacheDebugColors(): void {
  const debug = createRequire(import.meta.url)("debug") as DebugModule;
  if (!("colors" in debug.inspectOpts)) debug.inspectOpts.colors = isatty(process.stderr.fd);
}

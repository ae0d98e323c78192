import { createRequire } from "node:module";
import { isatty } from "node:tty";

interface DebugModule {
  inspectOpts: { colors?: unknown };
}

/**
 * Agenda creates a `debug` logger (`log.extend(...)`) on nearly every call of its job processor,
 * and `debug` asks `isatty(stderr)` for each new logger unless DEBUG_COLORS was set: a system
 * call per job per step. In a 1,000-task herd that was 40 % of the process's CPU, and it grows
 * with the number of task names at every poll. The answer cannot change while the process runs,
 * so it is computed once here; an explicit DEBUG_COLORS keeps its meaning.
 */
export function cacheDebugColors(): void {
  const debug = createRequire(import.meta.url)("debug") as DebugModule;
  if (!("colors" in debug.inspectOpts)) debug.inspectOpts.colors = isatty(process.stderr.fd);
}

import { readFileSync } from "node:fs";

/**
 * How this process was started, as far as signals are concerned (docs/operations.md, "Signals").
 *
 * `npx cronwarden serve`, `npm exec cronwarden serve` and an npm script without `exec` run the bin
 * through a shell: npm spawns `sh -c "cronwarden serve ..."`, and Debian's dash (the /bin/sh of the
 * node images) forks the command instead of replacing itself with it. npm forwards SIGTERM and
 * SIGINT to its child only, the shell, which dies of it without passing it on; npm then exits, and
 * node is left running, orphaned, still serving. Nothing in this package can make that shell pass
 * the signal on; what it can do is notice (a warning at start) and stop when the shell is gone.
 */
export interface ShellUnderNpm {
  /** npm_lifecycle_event: "npx" for npx and npm exec, else the script's name ("start"). */
  event: string;
  /** How a person would have typed it: "npx / npm exec", "npm run serve". */
  launcher: string;
  /** The shell between npm and this process: when it is gone, npm has been stopped. */
  shellPid: number;
  shell: string;
  npmPid: number;
}

interface ProcessInfo {
  ppid: number;
  /** The executable's name (comm), e.g. "sh", "node". */
  name: string;
  /** argv joined with spaces (npm rewrites its own as "npm exec cronwarden serve ..."). */
  commandLine: string;
}

/** /proc/<pid>: its parent, name and command line; undefined off Linux or once it has ended. */
export function processInfo(pid: number): ProcessInfo | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    // "pid (comm) state ppid ...": comm may hold spaces and parentheses
    const name = stat.slice(stat.indexOf("(") + 1, stat.lastIndexOf(")"));
    const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
    const commandLine = readFileSync(`/proc/${pid}/cmdline`, "utf8").replace(/\0+$/, "").replace(/\0/g, " ");
    return { ppid, name, commandLine };
  } catch {
    return undefined;
  }
}

const SHELLS = new Set(["sh", "dash", "bash", "ash", "ksh", "mksh", "zsh", "busybox"]);

/** npm itself: its title ("npm exec ...", "npm start") or node running npm-cli.js / npx-cli.js. */
function isNpm(info: ProcessInfo): boolean {
  return /^(?:npm|npx)(?:\s|$)/.test(info.commandLine) || /\bnp[mx]-cli\.js\b/.test(info.commandLine);
}

/**
 * The npm-through-a-shell case described above, or undefined: not started by npm, or npm is the
 * parent itself (a script that starts with `exec`, which the shell replaces itself with: then npm
 * forwards the signal to this process and waits for its drain). Linux only (it reads /proc).
 */
export function shellUnderNpm(
  environment: NodeJS.ProcessEnv,
  ppid: number = process.ppid,
  read: (pid: number) => ProcessInfo | undefined = processInfo,
): ShellUnderNpm | undefined {
  const event = environment.npm_lifecycle_event;
  if (!event) return undefined;
  const parent = read(ppid);
  if (!parent || !SHELLS.has(parent.name)) return undefined;
  const grandparent = read(parent.ppid);
  if (!grandparent || !isNpm(grandparent)) return undefined;
  return {
    event,
    launcher: event === "npx" ? "npx / npm exec" : `npm run ${event}`,
    shellPid: ppid,
    shell: parent.name,
    npmPid: parent.ppid,
  };
}

/** How often the parent is looked at: a getppid() call, cheap. */
export const PARENT_CHECK_MS = 250;

/**
 * Calls `gone` once this process's parent is no longer `parentPid` (it ended: the process was
 * re-parented). Returns a function that stops watching; the timer never keeps the process alive.
 */
export function watchParent(parentPid: number, gone: () => void, everyMs = PARENT_CHECK_MS): () => void {
  const timer = setInterval(() => {
    if (process.ppid === parentPid) return;
    clearInterval(timer);
    gone();
  }, everyMs);
  timer.unref();
  return () => clearInterval(timer);
}

/**
 * CPU time of processes, from Linux's /proc (user + system, every thread of the process): what a
 * herd costs per run, for the workers and for the PostgreSQL server. A herd on a machine whose
 * cores are all busy lasts as long as its CPU takes, and that CPU varies less between machines and
 * runs than the herd's length does (docs/benchmarks.md). Elsewhere than Linux: no figure.
 */
import { execFileSync } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";

let ticksPerSecond: number | undefined;

function clockTicks(): number {
  if (ticksPerSecond === undefined) {
    try {
      ticksPerSecond = Number(execFileSync("getconf", ["CLK_TCK"], { encoding: "utf8" }).trim()) || 100;
    } catch {
      ticksPerSecond = 100;
    }
  }
  return ticksPerSecond;
}

/** A process's state line: its parent and its CPU ticks so far, or undefined once it is gone. */
function statOf(pid: number): { parent: number; ticks: number } | undefined {
  let text: string;
  try {
    text = readFileSync(`/proc/${pid}/stat`, "utf8");
  } catch {
    return undefined;
  }
  // the command name in parentheses may hold spaces: the fields after its closing one are fixed
  const fields = text.slice(text.lastIndexOf(")") + 2).split(" ");
  return { parent: Number(fields[1]), ticks: Number(fields[11]) + Number(fields[12]) };
}

/** CPU milliseconds used so far by each of `pids` and, with `children`, by their direct children. */
export function cpuSnapshot(
  pids: readonly number[],
  options: { children?: boolean } = {},
): Map<number, number> {
  const ms = 1000 / clockTicks();
  const snapshot = new Map<number, number>();
  for (const pid of pids) {
    const stat = statOf(pid);
    if (stat) snapshot.set(pid, stat.ticks * ms);
  }
  if (options.children) {
    const parents = new Set(pids);
    let entries: string[] = [];
    try {
      entries = readdirSync("/proc");
    } catch {
      return snapshot;
    }
    for (const entry of entries) {
      const pid = Number(entry);
      if (!Number.isInteger(pid) || snapshot.has(pid)) continue;
      const stat = statOf(pid);
      if (stat && parents.has(stat.parent)) snapshot.set(pid, stat.ticks * ms);
    }
  }
  return snapshot;
}

/** CPU milliseconds used between two snapshots; a process new in `after` counts from zero. */
export function cpuUsedBetween(before: Map<number, number>, after: Map<number, number>): number {
  let used = 0;
  for (const [pid, ms] of after) used += ms - (before.get(pid) ?? 0);
  return used;
}

/** Whether this machine has /proc to read (Linux). */
export function canReadProcessCpu(): boolean {
  return statOf(process.pid) !== undefined;
}

/** The machine and the versions a bench result belongs to. */
import { execFileSync } from "node:child_process";
import { readFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { repoRoot } from "./children.js";

export interface Machine {
  cpu: string;
  cores: number;
  ramGb: number;
  kernel: string;
  node: string;
  postgres: string;
  agenda: string;
  postgresBackend: string;
  cronwarden: string;
  /** The last commit of src/ when the run started (see codeVersion). */
  commit: string;
  loadBefore: number[];
}

/** The last commit that changed src/, `+dirty` with uncommitted changes there (workers load src/ when they start). */
export function codeVersion(): string {
  try {
    const git = (...args: string[]) =>
      execFileSync("git", args, {
        cwd: repoRoot,
        encoding: "utf8",
        stdio: ["ignore", "pipe", "ignore"],
      }).trim();
    const commit = git("log", "-1", "--format=%h", "--", "src");
    const dirty = git("status", "--porcelain", "--", "src") !== "";
    return `${commit}${dirty ? "+dirty" : ""}`;
  } catch {
    return "unknown";
  }
}

async function versionOf(packageDir: string): Promise<string> {
  const text = await readFile(path.join(packageDir, "package.json"), "utf8");
  return (JSON.parse(text) as { version: string }).version;
}

export async function describeMachine(postgresVersion: string): Promise<Machine> {
  const cpus = os.cpus();
  return {
    cpu: cpus[0]?.model.trim() ?? "unknown",
    cores: os.availableParallelism(),
    ramGb: Math.round((os.totalmem() / 1024 ** 3) * 10) / 10,
    kernel: `${os.type()} ${os.release()}`,
    node: process.version,
    postgres: postgresVersion,
    agenda: await versionOf(path.join(repoRoot, "node_modules", "agenda")),
    postgresBackend: await versionOf(path.join(repoRoot, "node_modules", "@agendajs", "postgres-backend")),
    cronwarden: await versionOf(repoRoot),
    commit: codeVersion(),
    loadBefore: os.loadavg().map((load) => Math.round(load * 100) / 100),
  };
}

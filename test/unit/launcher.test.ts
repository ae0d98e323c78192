import { describe, expect, it } from "vitest";
import { processInfo, shellUnderNpm } from "../../src/serve/launcher.js";

/** A process table: pid -> parent, name, command line. */
function table(rows: Record<number, [ppid: number, name: string, commandLine: string]>) {
  return (pid: number) => {
    const row = rows[pid];
    return row ? { ppid: row[0], name: row[1], commandLine: row[2] } : undefined;
  };
}

describe("shellUnderNpm", () => {
  const npx = table({
    20: [10, "sh", "sh -c 'cronwarden' serve --tasks ./tasks.mjs"],
    10: [1, "npm exec cronwa", "npm exec cronwarden serve --tasks ./tasks.mjs"],
  });

  it("npx / npm exec: the shell between npm and this process, named with npm's pid", () => {
    expect(shellUnderNpm({ npm_lifecycle_event: "npx" }, 20, npx)).toEqual({
      event: "npx",
      launcher: "npx / npm exec",
      shellPid: 20,
      shell: "sh",
      npmPid: 10,
    });
  });

  it("an npm script without exec is the same case, named by its script", () => {
    const run = table({
      20: [10, "sh", "sh -c cronwarden serve"],
      10: [1, "node", "/usr/bin/node /usr/lib/node_modules/npm/bin/npm-cli.js run serve"],
    });
    expect(shellUnderNpm({ npm_lifecycle_event: "serve" }, 20, run)?.launcher).toBe("npm run serve");
  });

  it("not that case: npm is the parent (a script that execs), no npm at all, or a shell not run by npm", () => {
    const direct = table({ 10: [1, "npm start", "npm start"] });
    expect(shellUnderNpm({ npm_lifecycle_event: "start" }, 10, direct)).toBeUndefined();
    expect(shellUnderNpm({}, 20, npx)).toBeUndefined();
    // the variable inherited from an `npm test` further up, the parent a test runner's node
    const inherited = table({ 30: [10, "node", "node vitest"], 10: [1, "npm test", "npm test"] });
    expect(shellUnderNpm({ npm_lifecycle_event: "test" }, 30, inherited)).toBeUndefined();
    const terminal = table({ 40: [5, "bash", "-bash"], 5: [1, "sshd", "sshd: user"] });
    expect(shellUnderNpm({ npm_lifecycle_event: "npx" }, 40, terminal)).toBeUndefined();
    // no /proc (not Linux): nothing is said
    expect(shellUnderNpm({ npm_lifecycle_event: "npx" }, 20, () => undefined)).toBeUndefined();
  });

  it("reads this process's own parent from /proc", () => {
    const self = processInfo(process.pid);
    expect(self).toMatchObject({ ppid: process.ppid });
    expect(self?.commandLine).toContain(process.argv[1] ?? "");
  });
});

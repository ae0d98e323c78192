// The CLI entry point: bin/cronwarden.mjs imports its compiled form (dist/cli/run.js).
import { runCli } from "./main.js";

const code = await runCli(process.argv.slice(2), {
  out: (line) => process.stdout.write(`${line}\n`),
  err: (line) => process.stderr.write(`${line}\n`),
  env: process.env,
  cwd: process.cwd(),
});
process.exitCode = code;

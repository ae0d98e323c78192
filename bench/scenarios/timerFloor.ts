/**
 * The machine's own floor under lateness-minute: as many processes as that scenario runs per
 * contender, each a bare node timer and nothing else, all waiting for the same instants. Each
 * waits the way the engine waits for a slot (a timer to the last millisecond, the rest by
 * event-loop turns: src/engine/taskRunner.ts, #untilHandlerTime) and reports how late it woke.
 * No scheduler can start a handler sooner than its process is given a core: with more processes
 * than cores waking at once, p99 over a few dozen instants is decided by how soon the cores take
 * the last of them. These processes do nothing between instants, so their cores may be asleep
 * when an instant comes (on a virtual machine a halted vCPU wakes slowly); a contender's
 * processes were busy shortly before each slot (the start saves), so their p50 can be lower than
 * this one. The tail is what the contenders' are read against.
 *
 * Instants every 5 s (not every minute, to keep it short), after one that is not counted (the
 * wait's code running for the first time); the processes are idle in between, as the contenders'
 * are.
 */
import { spawn } from "node:child_process";
import { type BenchContext, percentile } from "../lib/common.js";

const SPACING_MS = 5_000;

/** Waits for `count` instants `spacing` ms apart from `first`, then prints the lateness of each (ms). */
const WAITER = `
const [first, count, spacing] = process.argv.slice(1).map(Number);
const { setTimeout: sleep } = await import("node:timers/promises");
const late = [];
// one instant more, first and not reported: it runs the wait's code for the first time
for (let n = -1; n < count; n++) {
  const at = first + (n + 1) * spacing;
  for (let left = at - Date.now(); left > 0; left = at - Date.now()) {
    if (left <= 1) await new Promise((resolve) => setImmediate(resolve));
    else await sleep(left - 1);
  }
  if (n >= 0) late.push(Date.now() - at);
}
process.stdout.write(JSON.stringify(late));
`;

export interface TimerFloorFigures {
  processes: number;
  boundaries: number;
  p50: number;
  p99: number;
  max: number;
}

export async function runTimerFloor(
  context: BenchContext,
  processes: number,
  boundariesEach: number,
): Promise<TimerFloorFigures> {
  const first = Math.ceil((Date.now() + 2_000) / SPACING_MS) * SPACING_MS;
  context.progress(
    `timer floor: ${processes} bare node processes, ${boundariesEach} instants each, ${SPACING_MS / 1000} s apart`,
  );
  const lateness = await Promise.all(
    Array.from(
      { length: processes },
      () =>
        new Promise<number[]>((resolve, reject) => {
          const child = spawn(
            process.execPath,
            [
              ...context.nodeFlags,
              "--input-type=module",
              "-e",
              WAITER,
              String(first),
              String(boundariesEach),
              String(SPACING_MS),
            ],
            { stdio: ["ignore", "pipe", "inherit"] },
          );
          let out = "";
          child.stdout.on("data", (chunk: Buffer) => {
            out += chunk.toString();
          });
          child.on("error", reject);
          child.on("exit", (code) => {
            if (code === 0) resolve(JSON.parse(out) as number[]);
            else reject(new Error(`timer floor process exited with ${code}`));
          });
        }),
    ),
  );
  const all = lateness.flat();
  context.progress(`timer floor: ${lateness.map((each) => each.join(", ")).join("; ")}`);
  return {
    processes,
    boundaries: all.length,
    p50: percentile(all, 50),
    p99: percentile(all, 99),
    max: Math.max(...all),
  };
}

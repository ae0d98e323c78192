/**
 * The machine's own floor under lateness-minute: as many processes as that scenario runs per
 * contender, each a bare node timer and nothing else, all waiting for the same instants, each
 * reporting how late it woke. Two waits, one after the other:
 * - **from idle**: a timer to the last millisecond, the rest by event-loop turns. These processes
 *   do nothing between instants, so their cores may be asleep when an instant comes (on a virtual
 *   machine a halted vCPU wakes slowly).
 * - **the engine's wait** (src/engine/slotWait.ts, imported from dist/): the same, after one
 *   wake-up shortly before the instant, as a run handed over ahead of its slot waits for it.
 * No scheduler can start a handler sooner than its process is given a core: with more processes
 * than cores waking at once, p99 over a few dozen instants is decided by how soon the cores take
 * the last of them. The contenders' tails are read against these.
 *
 * Instants every 5 s (not every minute, to keep it short), after one that is not counted (the
 * wait's code running for the first time); the processes are idle in between, as the contenders'
 * are.
 */
import { spawn } from "node:child_process";
import path from "node:path";
import { pathToFileURL } from "node:url";
import { repoRoot } from "../lib/children.js";
import { type BenchContext, percentile } from "../lib/common.js";
import { preparePlainNode } from "../lib/plainNode.js";

const SPACING_MS = 5_000;

/**
 * Waits for `count` instants `spacing` ms apart from `first`, then prints the lateness of each (ms).
 * With a module URL, each wait follows that module's `slotWaitStep`; without, it is the wait from idle.
 */
const WAITER = `
const [first, count, spacing] = process.argv.slice(1, 4).map(Number);
const stepModule = process.argv[4];
const { setTimeout: sleep } = await import("node:timers/promises");
const fromIdle = (left) => (left <= 0 ? "done" : left <= 1 ? "turn" : { timerMs: left - 1 });
const slotWaitStep = stepModule ? (await import(stepModule)).slotWaitStep : fromIdle;
const late = [];
// one instant more, first and not reported: it runs the wait's code for the first time
for (let n = -1; n < count; n++) {
  const at = first + (n + 1) * spacing;
  for (let step = slotWaitStep(at - Date.now()); step !== "done"; step = slotWaitStep(at - Date.now())) {
    if (step === "turn") await new Promise((resolve) => setImmediate(resolve));
    else await sleep(step.timerMs);
  }
  if (n >= 0) late.push(Date.now() - at);
}
process.stdout.write(JSON.stringify(late));
`;

export interface FloorFigures {
  processes: number;
  boundaries: number;
  p50: number;
  p99: number;
  max: number;
}

export interface TimerFloorFigures {
  fromIdle: FloorFigures;
  engineWait: FloorFigures;
}

export async function runTimerFloor(
  context: BenchContext,
  processes: number,
  boundariesEach: number,
): Promise<TimerFloorFigures> {
  await preparePlainNode(context.dir, context.progress); // dist/ (built once per bench run)
  const stepModule = pathToFileURL(path.join(repoRoot, "dist", "engine", "slotWait.js")).href;
  return {
    fromIdle: await measureWait(context, processes, boundariesEach, "from idle", undefined),
    engineWait: await measureWait(context, processes, boundariesEach, "the engine's wait", stepModule),
  };
}

async function measureWait(
  context: BenchContext,
  processes: number,
  boundariesEach: number,
  label: string,
  stepModule: string | undefined,
): Promise<FloorFigures> {
  const first = Math.ceil((Date.now() + 2_000) / SPACING_MS) * SPACING_MS;
  context.progress(
    `timer floor (${label}): ${processes} bare node processes, ${boundariesEach} instants each, ${SPACING_MS / 1000} s apart`,
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
              ...(stepModule ? [stepModule] : []),
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
  context.progress(`timer floor (${label}): ${lateness.map((each) => each.join(", ")).join("; ")}`);
  return {
    processes,
    boundaries: all.length,
    p50: percentile(all, 50),
    p99: percentile(all, 99),
    max: Math.max(...all),
  };
}

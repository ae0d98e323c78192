/**
 * What both contender workers (bench/workers/agenda.ts and cronwarden.ts) do around their
 * scheduler: read the spec, report starts, ends and errors to the orchestrator, stop on request,
 * and report ready (with the set-up time) or fatal.
 */
import { type ContenderSpec, exitWithParent, type ParentMessage, readSpec, send } from "./protocol.js";

export interface ContenderWorker {
  spec: ContenderSpec;
  label: string;
  pid: number;
  /** A handler was entered, for `slot` (epoch ms, null when unknown). */
  started(task: string, slot: number | null, rerun: boolean): void;
  finished(task: string, error: string | null): void;
  engineError(message: string): void;
  /** Starts the scheduler and reports ready, or fatal (and exits); on "stop", `stop` then exit. */
  run(handlers: { start: () => Promise<void>; stop: () => Promise<unknown> }): Promise<void>;
}

export function contenderWorker(): ContenderWorker {
  exitWithParent();
  const began = Date.now();
  const spec = readSpec<ContenderSpec>();
  const { label } = spec;
  const pid = process.pid;
  return {
    spec,
    label,
    pid,
    started: (task, slot, rerun) => send({ type: "start", label, pid, task, slot, at: Date.now(), rerun }),
    finished: (task, error) => send({ type: "finish", label, pid, task, at: Date.now(), error }),
    engineError: (message) => send({ type: "engine-error", label, pid, at: Date.now(), message }),
    async run({ start, stop }) {
      process.on("message", (message: ParentMessage) => {
        if (message.type !== "stop") return;
        void (async () => {
          await stop().catch(() => undefined);
          send({ type: "stopped", label, pid });
          process.exit(0);
        })();
      });
      try {
        await start();
        send({ type: "ready", label, pid, at: Date.now(), setupMs: Date.now() - began });
      } catch (error) {
        send({ type: "fatal", label, pid, message: (error as Error).stack ?? String(error) });
        process.exit(1);
      }
    },
  };
}

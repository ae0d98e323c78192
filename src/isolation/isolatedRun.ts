import { RunTimeoutError } from "../engine/runSupervisor.js";
import type { HostWorker } from "./hostWorker.js";
import type { ModuleHandlerSpec } from "./isolationSpec.js";
import type { FromHost, HandlerContext, WireContext, WireError } from "./protocol.js";

const LEVELS = new Set(["fatal", "error", "warn", "info", "debug", "trace"]);

export interface IsolatedRunOptions {
  host: HostWorker;
  spec: ModuleHandlerSpec;
  context: HandlerContext;
  secrets: Readonly<Record<string, string>>;
  /** The task's timeout in force (src/isolation/taskLimits.ts); undefined: none. */
  timeoutMs: number | undefined;
  /** How long a handler asked to stop may take before its host is ended (the scheduler's timeoutGraceMs). */
  graceMs: number;
}

/** How an isolated run ended: `reusable` when its host may run another (its handler settled). */
export type IsolatedOutcome =
  | { ok: true; value: unknown; reusable: true }
  | { ok: false; error: Error; reusable: boolean };

let nextRunId = 1;

/**
 * One run of an isolated handler in its host (src/isolation/host.mjs), with the hard limits of
 * docs/isolation.md: the handler's signal fires at its timeout or when the scheduler's signal
 * fires (lock lost, shutdown, overlap cancel); a handler still running `graceMs` later has its host
 * ended (worker.terminate(), SIGKILL) and the run fails `timeout (terminated)` (a RunTimeoutError:
 * retried by the task's retry policy, alerted as a timeout). A host that runs out of memory,
 * crashes or exits fails the run with that reason. Never rejects.
 */
export function runIsolated(options: IsolatedRunOptions): Promise<IsolatedOutcome> {
  const { host, spec, context, graceMs } = options;
  const id = nextRunId++;
  const what = spec.mode === "worker" ? "its worker thread was terminated" : "its child process was killed";
  return new Promise<IsolatedOutcome>((resolve) => {
    const timers: NodeJS.Timeout[] = [];
    let timedOut: string | undefined;
    let stopping = false;
    const finish = (outcome: IsolatedOutcome) => {
      for (const timer of timers) clearTimeout(timer);
      context.signal.removeEventListener("abort", onAbort);
      host.listen(undefined);
      resolve(outcome);
    };
    const fail = (error: Error, reusable: boolean) => finish({ ok: false, error, reusable });
    const stopWithin = (reason: string, terminated: () => Error) => {
      if (stopping) return;
      stopping = true;
      host.post({ type: "abort", id, reason });
      timers.push(
        setTimeout(() => {
          // the run's failure first: the host's end, which follows, is not its reason
          fail(terminated(), false);
          host.kill("terminated");
        }, graceMs),
      );
    };
    const onAbort = () => {
      const reason = reasonOf(context.signal.reason);
      stopWithin(
        reason,
        () =>
          new Error(`${reason}; the handler did not stop within ${seconds(graceMs)} of grace and ${what}`),
      );
    };
    host.listen({
      message: (message) => {
        if (message.type === "ready" || message.id !== id) return;
        if (message.type === "log") return logLine(context, message);
        if (timedOut !== undefined) return fail(new RunTimeoutError(timedOut), true);
        if (message.ok) finish({ ok: true, value: message.value, reusable: true });
        else fail(errorOf(message.error), true);
      },
      ended: (reason) =>
        fail(new Error(`${spec.mode === "worker" ? "worker thread" : "child process"} ${reason}`), false),
    });
    if (options.timeoutMs !== undefined) {
      const timeoutMs = options.timeoutMs;
      timers.push(
        setTimeout(() => {
          timedOut = `timed out after ${seconds(timeoutMs)}`;
          stopWithin(
            timedOut,
            () =>
              new RunTimeoutError(
                `timeout (terminated): timed out after ${seconds(timeoutMs)} and did not stop within ${seconds(graceMs)} of grace; ${what}`,
              ),
          );
        }, timeoutMs),
      );
    }
    context.signal.addEventListener("abort", onAbort, { once: true });
    host.post({
      type: "run",
      id,
      moduleUrl: spec.moduleUrl,
      exportName: spec.exportName,
      context: wireContext(context),
      secrets: { ...options.secrets },
    });
    if (context.signal.aborted) onAbort();
  });
}

function wireContext(context: HandlerContext): WireContext {
  return {
    taskName: context.taskName,
    scheduledAt: context.scheduledAt,
    startedAt: context.startedAt,
    attempt: context.attempt,
    runKey: context.runKey,
    trigger: context.trigger,
    instanceId: context.instanceId,
    rerunOf: context.rerunOf,
    upstreams: context.upstreams,
  };
}

/** A line the handler logged, through the run's logger: in the log and the run record, redacted. */
function logLine(context: HandlerContext, line: Extract<FromHost, { type: "log" }>): void {
  const level = (LEVELS.has(line.level) ? line.level : "info") as "info";
  if (line.data) context.logger[level](line.data, line.msg);
  else context.logger[level](line.msg);
}

function errorOf(wire: WireError): Error {
  const error = new Error(wire.message);
  error.name = wire.name;
  if (wire.stack !== undefined) error.stack = wire.stack;
  return error;
}

function reasonOf(reason: unknown): string {
  return reason instanceof Error ? reason.message : typeof reason === "string" ? reason : "aborted";
}

function seconds(ms: number): string {
  return ms % 1000 === 0 ? `${ms / 1000} s` : `${(ms / 1000).toFixed(1)} s`;
}

import type { Logger } from "./logger.js";
import { toError } from "./logger.js";

/**
 * The one place where cronwarden calls code it does not own about something that happened: the
 * scheduler's event listeners (Scheduler.emit), the engine's hooks (EngineOptions.hooks) and
 * Subscriptions. A listener that throws, or returns a promise that rejects, never fails a run, a
 * lock, a reconcile or the scheduler, and never keeps the other listeners from being called.
 * docs/design.md ("Listeners and hooks").
 */

type Listener = (...args: never[]) => unknown;

/**
 * Calls `listener` with `args`; a throw, or a rejection of the promise it returns, goes to
 * `onError` (itself guarded: an onError that throws is dropped) instead of the caller.
 */
export function callListener(
  listener: Listener,
  thisArg: unknown,
  args: readonly unknown[],
  onError: (error: unknown) => void,
): void {
  const report = (error: unknown) => {
    try {
      onError(error);
    } catch {
      // the reporter of a failure must not become one
    }
  };
  let result: unknown;
  try {
    result = (listener as (...values: unknown[]) => unknown).apply(thisArg, args as unknown[]);
  } catch (error) {
    report(error);
    return;
  }
  if (isThenable(result)) {
    // an async listener is not awaited (an event does not wait for its listeners); its rejection
    // is reported instead of becoming an unhandled rejection, which ends a Node process
    result.then(undefined, report);
  }
}

function isThenable(value: unknown): value is PromiseLike<unknown> {
  return (
    (typeof value === "object" || typeof value === "function") &&
    value !== null &&
    typeof (value as { then?: unknown }).then === "function"
  );
}

/**
 * Logs listener failures: the first failure of each listener on each event at error level, with
 * the event's name; its later failures at debug level, so a listener that throws on every run
 * does not flood the log.
 */
export class ListenerFailures {
  readonly #logger: Logger;
  readonly #kind: string;
  readonly #logged = new WeakMap<object, Set<string>>();

  /** `kind` names what failed in the log line: "listener" (events) or "hook" (engine hooks). */
  constructor(logger: Logger, kind: string) {
    this.#logger = logger;
    this.#kind = kind;
  }

  report(event: string, listener: object, thrown: unknown): void {
    const error = toError(thrown);
    let events = this.#logged.get(listener);
    if (!events) {
      events = new Set();
      this.#logged.set(listener, events);
    }
    const first = !events.has(event);
    events.add(event);
    this.#logger[first ? "error" : "debug"](
      { err: error, event, listener: listenerName(listener) },
      first
        ? `a "${event}" ${this.#kind} failed: ${error.message}; ignored, the scheduler and the run go on (later failures of this ${this.#kind} on "${event}" are logged at debug level)`
        : `a "${event}" ${this.#kind} failed again: ${error.message}; ignored`,
    );
  }
}

function listenerName(listener: object): string {
  const name = (listener as { name?: unknown }).name;
  return typeof name === "string" && name !== "" ? name : "(anonymous)";
}

/**
 * Calls each of `listeners` with `args`, each in its own guard (callListener); failures go to
 * `failures`, once per listener and event. Returns whether there was any listener.
 */
export function safeEmit(
  listeners: readonly Listener[],
  event: string,
  thisArg: unknown,
  args: readonly unknown[],
  failures: ListenerFailures,
): boolean {
  for (const listener of listeners) {
    callListener(listener, thisArg, args, (error) => failures.report(event, listener, error));
  }
  return listeners.length > 0;
}

/**
 * The same hooks, each called through callListener: a hook that throws or rejects is logged
 * (ListenerFailures) and the engine goes on as if it had returned.
 */
export function guardHooks<T extends object>(hooks: T | undefined, failures: ListenerFailures): T {
  const guarded: Record<string, unknown> = {};
  for (const [name, hook] of Object.entries(hooks ?? {})) {
    if (typeof hook !== "function") continue;
    guarded[name] = (...args: unknown[]) => {
      callListener(hook as Listener, hooks, args, (error) => failures.report(name, hook, error));
    };
  }
  return guarded as T;
}

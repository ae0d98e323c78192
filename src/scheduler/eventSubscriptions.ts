import type { EventEmitter } from "node:events";
import { callListener } from "../core/safeEmit.js";
import type { SchedulerEvents } from "./events.js";

/**
 * The part of a Scheduler that event consumers (metrics, alerts, the admin server) need: any
 * emitter of the scheduler's typed events (a Scheduler, or a stand-in in tests).
 */
export type SchedulerEventSource = Pick<EventEmitter<SchedulerEvents>, "on" | "off">;

/**
 * A set of scheduler event listeners that never throw into the scheduler (a listener runs inside
 * the scheduler's emit, so an exception there would break a run or a reconcile) and that can all
 * be removed at once.
 */
export class Subscriptions {
  readonly #source: SchedulerEventSource;
  readonly #onError: (event: keyof SchedulerEvents, error: unknown) => void;
  readonly #removers: Array<() => void> = [];

  constructor(source: SchedulerEventSource, onError: (event: keyof SchedulerEvents, error: unknown) => void) {
    this.#source = source;
    this.#onError = onError;
  }

  on<K extends keyof SchedulerEvents>(
    event: K,
    listener: (...args: SchedulerEvents[K]) => void | Promise<void>,
  ): this {
    // a throw, or the rejection of an async listener, goes to onError (src/core/safeEmit.ts)
    const guarded = (...args: SchedulerEvents[K]) =>
      callListener(listener, undefined, args, (error) => this.#onError(event, error));
    // Node's typed EventEmitter cannot check a listener for a generic event name; the untyped
    // view is the same object, and `guarded` has exactly the arguments SchedulerEvents[K] declares.
    const emitter: Pick<EventEmitter, "on" | "off"> = this.#source;
    emitter.on(event, guarded);
    this.#removers.push(() => emitter.off(event, guarded));
    return this;
  }

  /** Removes every listener added through this set. Idempotent. */
  close(): void {
    for (const remove of this.#removers.splice(0)) remove();
  }
}

import { CronwardenError } from "../core/errors.js";
import type { Logger } from "../core/logger.js";
import type { ConfigDocument, ConfigSource } from "../sources/configSource.js";
import type { CronRules } from "./cronValidator.js";
import type { DesiredState } from "./desiredState.js";
import { parseDesiredState } from "./desiredState.js";
import { EntryMemo } from "./entryMemo.js";

/** A snapshot whose apply failed (database unreachable) is applied again after this delay. */
const APPLY_RETRY_MS = 5_000;

export interface ConfigWatcherOptions {
  source: ConfigSource;
  defaultTimezone: string;
  rules: CronRules;
  logger: Logger;
  /** Called with each new valid snapshot, one at a time; a burst coalesces to the latest. */
  onSnapshot: (state: DesiredState) => Promise<void>;
  /** A version was read and validated. */
  onLoaded?: (state: DesiredState) => void;
  /** A version could not be read or parsed (the source is unreachable or the document is malformed). */
  onError?: (error: Error) => void;
  /** Why a parsed snapshot must not be applied at all (the fleet guard), or undefined. */
  guard?: (state: DesiredState) => string | undefined;
  now?: () => Date;
}

/**
 * Reads a ConfigSource, validates each version into a DesiredState and keeps the last valid one.
 * A version that cannot be read or parsed is logged and ignored; invalid entries are logged and
 * dropped from their snapshot while the valid ones go on to the reconciler.
 */
export class ConfigWatcher {
  readonly #options: ConfigWatcherOptions;
  readonly #logger: Logger;
  #current: DesiredState | undefined;
  #lastRevision: string | undefined;
  #pending: DesiredState | undefined;
  #delivering: Promise<void> | undefined;
  #unsubscribe: (() => Promise<void>) | undefined;
  #retryTimer: NodeJS.Timeout | undefined;
  /** The last document's valid entries: an unchanged entry is not validated again. */
  readonly #entries = new EntryMemo();
  /** The source's current error, logged once when it starts; repeats go to debug. */
  #failing: string | undefined;

  constructor(options: ConfigWatcherOptions) {
    this.#options = options;
    this.#logger = options.logger.child({ component: "config", source: options.source.description });
  }

  /** The desired state in force: the last valid snapshot. */
  get current(): DesiredState | undefined {
    return this.#current;
  }

  /** Reads the full desired state once. Returns undefined (and logs why) if it cannot be used. */
  async loadInitial(): Promise<DesiredState | undefined> {
    try {
      return this.#accept(await this.#options.source.load());
    } catch (error) {
      this.#failing = (error as Error).message;
      this.#logger.error(
        { err: error },
        `${(error as Error).message}; starting without a config from the source: the last applied config (if any) is used until a valid version arrives`,
      );
      this.#options.onError?.(error as Error);
      return undefined;
    }
  }

  /** Takes a snapshot from elsewhere (the durable last-known state) as the one in force. */
  adopt(state: DesiredState): void {
    this.#current = state;
    this.#lastRevision = state.revision;
  }

  start(): void {
    if (this.#unsubscribe) return;
    this.#unsubscribe = this.#options.source.subscribe({
      next: (document) => this.#onDocument(document),
      error: (error) => {
        const kept = this.#current
          ? `revision ${this.#current.revision}`
          : "the jobs as they are in the database";
        this.#logFailure(error, `${error.message}; keeping ${kept}`);
        this.#options.onError?.(error);
      },
    });
  }

  async stop(): Promise<void> {
    const unsubscribe = this.#unsubscribe;
    this.#unsubscribe = undefined;
    clearTimeout(this.#retryTimer);
    await unsubscribe?.();
    await this.#delivering;
  }

  /** One error line per state change: a source failing the same way on every watch event logs once. */
  #logFailure(error: Error, message: string, fields: Record<string, unknown> = {}): void {
    if (this.#failing === error.message) {
      this.#logger.debug({ ...fields, error: error.message }, `still failing: ${message}`);
      return;
    }
    this.#failing = error.message;
    this.#logger.error({ ...fields, err: error }, message);
  }

  #recovered(unchanged: boolean): void {
    if (this.#failing === undefined) return;
    this.#logger.info({ previousError: this.#failing }, "config source readable again");
    this.#failing = undefined;
    // the same revision as before the failure: no new snapshot, but the source is healthy again
    if (unchanged && this.#current) this.#options.onLoaded?.(this.#current);
  }

  #onDocument(document: ConfigDocument): void {
    if (document.revision === this.#lastRevision) {
      this.#recovered(true);
      return;
    }
    let state: DesiredState;
    try {
      state = this.#accept(document);
    } catch (error) {
      const kept = this.#current
        ? `revision ${this.#current.revision}`
        : "the jobs as they are in the database";
      this.#logFailure(error as Error, `${(error as Error).message}; keeping ${kept}`, {
        revision: document.revision,
      });
      this.#options.onError?.(error as Error);
      return;
    }
    this.#recovered(false);
    this.#pending = state;
    this.#delivering ??= this.#deliver();
  }

  async #deliver(): Promise<void> {
    try {
      while (this.#pending) {
        const state = this.#pending;
        this.#pending = undefined;
        try {
          await this.#options.onSnapshot(state);
        } catch (error) {
          this.#logger.error(
            { err: error, revision: state.revision },
            `applying config revision ${state.revision} failed; retrying in ${APPLY_RETRY_MS / 1000} s`,
          );
          this.#scheduleRetry(state);
        }
      }
    } finally {
      this.#delivering = undefined;
    }
  }

  #scheduleRetry(state: DesiredState): void {
    clearTimeout(this.#retryTimer);
    this.#retryTimer = setTimeout(() => {
      if (this.#current !== state || this.#pending) return; // a newer snapshot supersedes it
      this.#pending = state;
      this.#delivering ??= this.#deliver();
    }, APPLY_RETRY_MS);
    this.#retryTimer.unref();
  }

  /** Validates a document; throws when it is unusable as a whole. */
  #accept(document: ConfigDocument): DesiredState {
    const { source, defaultTimezone, rules } = this.#options;
    const state = parseDesiredState(document.content, {
      defaultTimezone,
      rules,
      now: this.#options.now?.() ?? new Date(),
      source: source.description,
      revision: document.revision,
      memo: this.#entries,
    });
    const refusal = this.#options.guard?.(state);
    if (refusal) {
      this.#lastRevision = document.revision; // refused once, not again on every re-read of it
      throw new CronwardenError("CONFIG_REFUSED", refusal);
    }
    this.#lastRevision = document.revision;
    this.#current = state;
    this.#options.onLoaded?.(state);
    this.#logger.info(
      { revision: state.revision, valid: state.tasks.length, rejected: state.rejected.length },
      `config loaded: ${state.tasks.length} valid entr${state.tasks.length === 1 ? "y" : "ies"}, ${state.rejected.length} rejected`,
    );
    return state;
  }
}

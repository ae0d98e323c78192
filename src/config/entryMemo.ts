import type { DependencySpec } from "../core/dependencies/spec.js";
import { sameValue } from "../core/sameValue.js";
import type { CronRules } from "./cronValidator.js";
import { scheduleCheckStands } from "./cronValidator.js";
import type { DesiredTask } from "./desiredState.js";

/** What a valid entry becomes: its task, and its dependency's spec. */
export interface EntryRead {
  task: DesiredTask;
  after?: DependencySpec;
}

/**
 * The valid entries of the last document a ConfigWatcher parsed, by position, with what each
 * became: an entry equal to the one at its position last time becomes the same again, so an edit
 * of one entry in a config of 100,000 validates one entry, not all of them (src/config/desiredState.ts
 * parseDesiredState). Only answers that cannot have changed are reused: not an entry naming
 * calendars (an ics file may have changed), not one whose schedule check depended on the time
 * (src/config/cronValidator.ts), and none when the default timezone or the rules changed.
 */
export class EntryMemo {
  #context = "";
  #raws: unknown[] = [];
  #reads: (EntryRead | undefined)[] = [];
  #nextRaws: unknown[] = [];
  #nextReads: (EntryRead | undefined)[] = [];

  /** Starts a document (returns this); what every entry's answer depends on besides itself. */
  begin(defaultTimezone: string, rules: CronRules): this {
    const context = `${defaultTimezone}\n${JSON.stringify(rules)}`;
    if (context !== this.#context) {
      this.#raws = [];
      this.#reads = [];
    }
    this.#context = context;
    this.#nextRaws = [];
    this.#nextReads = [];
    return this;
  }

  /** What the entry at `index` became last time, when it is equal to it and the answer stands. */
  reuse(index: number, raw: unknown): EntryRead | undefined {
    const read = this.#reads[index];
    return read !== undefined && sameValue(this.#raws[index], raw) ? read : undefined;
  }

  /** Keeps an answer `reuse` gave: it was kept because it cannot change by itself, which still holds. */
  keepReused(index: number, raw: unknown, read: EntryRead): void {
    this.#nextRaws[index] = raw;
    this.#nextReads[index] = read;
  }

  /** Keeps what a valid entry became, when its answer cannot change by itself. */
  keep(index: number, raw: unknown, read: EntryRead, rules: CronRules, defaultTimezone: string): void {
    const fields = raw as Record<string, unknown>;
    if (fields.exclude !== undefined) return;
    const timezone = typeof fields.timezone === "string" ? fields.timezone : defaultTimezone;
    if (typeof fields.cron === "string" && !scheduleCheckStands(fields.cron, timezone, rules)) return;
    this.#nextRaws[index] = raw;
    this.#nextReads[index] = read;
  }

  /** Ends a document: its entries are the ones reused next time. */
  end(): void {
    this.#raws = this.#nextRaws;
    this.#reads = this.#nextReads;
  }
}

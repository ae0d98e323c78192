/**
 * One alert per (task, event) per window: the first goes out, the next ones within the window
 * are counted, and the first one after the window says how many were held back.
 */
export class Silencer {
  readonly #windowMs: number;
  readonly #entries = new Map<string, { sentAt: number; suppressed: number }>();

  constructor(windowMs: number) {
    this.#windowMs = windowMs;
  }

  /** `send: false` while silenced; on send, how many alerts of this key were held back since the last one. */
  admit(key: string, now: number): { send: true; suppressed: number } | { send: false } {
    const entry = this.#entries.get(key);
    if (entry && now - entry.sentAt < this.#windowMs) {
      entry.suppressed += 1;
      return { send: false };
    }
    this.#prune(now);
    this.#entries.set(key, { sentAt: now, suppressed: 0 });
    return { send: true, suppressed: entry?.suppressed ?? 0 };
  }

  #prune(now: number): void {
    if (this.#entries.size < 1000) return;
    for (const [key, entry] of this.#entries) {
      if (now - entry.sentAt >= this.#windowMs && entry.suppressed === 0) this.#entries.delete(key);
    }
  }
}

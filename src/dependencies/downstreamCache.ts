import type { Pool } from "pg";
import type { Clock } from "../core/clock.js";
import { type DependencySpec, specOf } from "../core/dependencies/spec.js";
import { selectDownstreamRows } from "../engine/sql.js";

/** A downstream task's row as the dependency coordinator (src/dependencies/coordinator.ts) reads it. */
export interface Downstream {
  name: string;
  spec: DependencySpec;
  disabled: boolean;
}

/** The downstream rows by upstream name; `any`: there was at least one. */
export interface DownstreamsByUpstream {
  byUpstream: Map<string, Downstream[]>;
  any: boolean;
}

/** How long the downstream rows read from the database are reused. */
const DOWNSTREAMS_TTL_MS = 1_000;
/** With no downstream at all, how long before looking again (keeps an idle instance's load flat). */
export const NO_DOWNSTREAMS_TTL_MS = 5_000;

/**
 * The downstream rows, read once and reused for a short while: a herd's runs ask at every start
 * and every outcome whether they have downstreams, and the answer is almost always the same.
 * Calls that come while the rows are read share the read; a read started before forget() (a
 * dependency changed) is not kept.
 */
export class DownstreamCache {
  readonly #pool: Pool;
  readonly #clock: Clock;
  #rows: (DownstreamsByUpstream & { at: number }) | undefined;
  #read: Promise<DownstreamsByUpstream> | undefined;
  #generation = 0;

  constructor(pool: Pool, clock: Clock) {
    this.#pool = pool;
    this.#clock = clock;
  }

  /** The rows by upstream name, read again once older than their TTL (`noneTtlMs` when there were none). */
  byUpstream(noneTtlMs = NO_DOWNSTREAMS_TTL_MS): Promise<DownstreamsByUpstream> {
    const cached = this.#fresh(noneTtlMs);
    if (cached) return Promise.resolve(cached);
    if (this.#read) return this.#read;
    const generation = this.#generation;
    const read = (async () => {
      const byUpstream = new Map<string, Downstream[]>();
      const rows = await selectDownstreamRows(this.#pool);
      for (const row of rows) {
        const spec = specOf(row.after);
        if (!spec) continue;
        for (const upstream of new Set(spec.upstreams)) {
          const list = byUpstream.get(upstream) ?? [];
          list.push({ name: row.name, spec, disabled: row.disabled });
          byUpstream.set(upstream, list);
        }
      }
      const fresh = { at: this.#clock.monotonic(), byUpstream, any: rows.length > 0 };
      if (generation === this.#generation) this.#rows = fresh;
      return fresh;
    })().finally(() => {
      if (this.#read === read) this.#read = undefined;
    });
    this.#read = read;
    return read;
  }

  /**
   * The task has no downstream by rows read recently enough: its run's start and outcome cost no
   * promise and no statement.
   */
  without(taskName: string): boolean {
    const cached = this.#fresh(NO_DOWNSTREAMS_TTL_MS);
    return cached !== undefined && !cached.byUpstream.has(taskName);
  }

  /** The downstream rows changed: the cache and any read in flight are not used again. */
  forget(): void {
    this.#rows = undefined;
    this.#read = undefined;
    this.#generation += 1;
  }

  #fresh(noneTtlMs: number): DownstreamsByUpstream | undefined {
    const cached = this.#rows;
    return cached && this.#clock.monotonic() - cached.at < (cached.any ? DOWNSTREAMS_TTL_MS : noneTtlMs)
      ? cached
      : undefined;
  }
}

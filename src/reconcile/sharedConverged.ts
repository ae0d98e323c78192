import { createHash } from "node:crypto";
import type { DesiredState } from "../config/desiredState.js";
import type { Logger } from "../core/logger.js";

/** A reconcile that converged: the revision it applied, what its plan depended on, the rows' digest after it. */
export interface ConvergedRecord {
  revision: string;
  key: string;
  digest: string;
}

/** Where the record is kept for every instance (DesiredStateStore, beside the applied snapshot). */
export interface ConvergedStore {
  saveConverged(record: ConvergedRecord): Promise<void>;
  loadConverged(): Promise<ConvergedRecord | undefined>;
}

/**
 * The instances' shared record of the last converged reconcile. An edit reaches the rows through
 * whichever instance takes the reconcile lock first; the others then find the rows' digest
 * changed (by its writes, not by drift). When the digest is the one that instance recorded for
 * the same revision, planned for the same source and the same registered tasks, every row already
 * matches the snapshot, so the others plan only the entries they see changed instead of reading
 * every row (src/reconcile/configReconciler.ts #scopedPass). A row changed outside a reconcile
 * changes the digest away from every record: drift is still planned in full. The record is an
 * optimisation: failing to read or write it costs a full pass, never a wrong plan.
 */
export class SharedConverged {
  readonly #store: ConvergedStore | undefined;
  readonly #logger: Logger;
  /** The last record this instance wrote or read (a record equal to it is not written again). */
  #known: ConvergedRecord | undefined;
  #keyOf: { names: ReadonlySet<string>; source: string; key: string } | undefined;

  constructor(store: ConvergedStore | undefined, logger: Logger) {
    this.#store = store;
    this.#logger = logger;
  }

  /** Does the shared record say rows with `digest` are converged for `desired` under these registered tasks? */
  async converged(desired: DesiredState, registered: ReadonlySet<string>, digest: string): Promise<boolean> {
    if (!this.#store) return false;
    try {
      const record = await this.#store.loadConverged();
      if (record) this.#known = record;
      return (
        record !== undefined &&
        record.digest === digest &&
        record.revision === desired.revision &&
        record.key === this.#key(desired, registered)
      );
    } catch (error) {
      this.#logger.warn({ err: error }, "could not read the shared converged record; planning every row");
      return false;
    }
  }

  /** Records that rows with `digest` are converged for `desired`; a failure is logged, not thrown. */
  async record(desired: DesiredState, registered: ReadonlySet<string>, digest: string): Promise<void> {
    if (!this.#store) return;
    const record = { revision: desired.revision, key: this.#key(desired, registered), digest };
    const known = this.#known;
    if (known && known.revision === record.revision && known.key === record.key && known.digest === digest)
      return;
    try {
      await this.#store.saveConverged(record);
      this.#known = record;
    } catch (error) {
      this.#logger.warn(
        { err: error, revision: desired.revision },
        "could not save the shared converged record; the other instances plan every row once",
      );
    }
  }

  /** What a plan depends on besides the snapshot and the rows: its source and the registered tasks. */
  #key(desired: DesiredState, registered: ReadonlySet<string>): string {
    const cached = this.#keyOf;
    if (cached && cached.names === registered && cached.source === desired.source) return cached.key;
    const hash = createHash("md5").update(desired.source).update("\n");
    for (const name of [...registered].sort()) hash.update(name).update("\n");
    const key = `${registered.size}:${hash.digest("hex")}`;
    this.#keyOf = { names: registered, source: desired.source, key };
    return key;
  }
}

import { isConnectionError } from "./retry.js";
import type { RunLogInsert } from "./sql/runLog.js";

/**
 * Run-log rows written in batches: rows asked for while a batch is being written go together in
 * the next one (one statement, one commit), so a herd of runs does not cost one INSERT per start
 * and per outcome. A row waits at most for the batch in flight. Each row's promise settles with its
 * own batch. A batch that fails for another reason than the connection is written again row by row,
 * so one bad row fails alone (a connection error fails the whole batch: the caller retries).
 */
export class RunLogBatch {
  readonly #insert: (rows: readonly RunLogInsert[]) => Promise<void>;
  readonly #maxRows: number;
  #queue: { row: RunLogInsert; settle: (error?: unknown) => void }[] = [];
  #writing = false;

  constructor(insert: (rows: readonly RunLogInsert[]) => Promise<void>, maxRows = 500) {
    this.#insert = insert;
    this.#maxRows = maxRows;
  }

  write(row: RunLogInsert): Promise<void> {
    return new Promise((resolve, reject) => {
      this.#queue.push({ row, settle: (error) => (error === undefined ? resolve() : reject(error)) });
      if (!this.#writing) {
        this.#writing = true;
        setImmediate(() => void this.#drain());
      }
    });
  }

  async #drain(): Promise<void> {
    try {
      while (this.#queue.length > 0) {
        const batch = this.#queue.slice(0, this.#maxRows);
        this.#queue = this.#queue.slice(batch.length);
        try {
          await this.#insert(batch.map((entry) => entry.row));
          for (const entry of batch) entry.settle();
        } catch (error) {
          if (batch.length === 1 || isConnectionError(error)) {
            for (const entry of batch) entry.settle(error);
            continue;
          }
          for (const entry of batch)
            await this.#insert([entry.row]).then(
              () => entry.settle(),
              (rowError: unknown) => entry.settle(rowError),
            );
        }
      }
    } finally {
      this.#writing = false;
    }
  }
}

import { isConnectionError } from "./retry.js";

/**
 * Statements of many runs sent as one: items asked for while a batch is being written go together
 * in the next one (one statement, one commit), so a herd of runs does not cost one statement per
 * run and step. An item waits at most for the batch in flight. Each item's promise settles with its
 * own answer. A batch that fails for another reason than the connection is sent again item by item,
 * so one bad item fails alone (a connection error fails the whole batch: the callers retry).
 * Items with the same `key` never share a batch (a statement that touches one row twice would
 * apply only one of the two).
 */
interface Queued<Item, Answer> {
  item: Item;
  settle: (answer: Answer | undefined, error?: unknown) => void;
}

export class StatementBatch<Item, Answer> {
  readonly #send: (items: readonly Item[]) => Promise<readonly Answer[]>;
  readonly #key: ((item: Item) => string | undefined) | undefined;
  readonly #maxItems: number;
  #queue: Queued<Item, Answer>[] = [];
  #sending = false;

  /** `send` answers one value per item, in the items' order. */
  constructor(
    send: (items: readonly Item[]) => Promise<readonly Answer[]>,
    options: { key?: (item: Item) => string | undefined; maxItems?: number } = {},
  ) {
    this.#send = send;
    this.#key = options.key;
    this.#maxItems = options.maxItems ?? 500;
  }

  submit(item: Item): Promise<Answer> {
    return new Promise<Answer>((resolve, reject) => {
      this.#queue.push({
        item,
        settle: (answer, error) => (error === undefined ? resolve(answer as Answer) : reject(error)),
      });
      if (!this.#sending) {
        this.#sending = true;
        setImmediate(() => void this.#drain());
      }
    });
  }

  #take(): Queued<Item, Answer>[] {
    const batch: Queued<Item, Answer>[] = [];
    const rest: Queued<Item, Answer>[] = [];
    const keys = new Set<string>();
    for (const entry of this.#queue) {
      const key = this.#key?.(entry.item);
      if (batch.length >= this.#maxItems || (key !== undefined && keys.has(key))) rest.push(entry);
      else {
        if (key !== undefined) keys.add(key);
        batch.push(entry);
      }
    }
    this.#queue = rest;
    return batch;
  }

  async #drain(): Promise<void> {
    try {
      while (this.#queue.length > 0) {
        const batch = this.#take();
        try {
          const answers = await this.#send(batch.map((entry) => entry.item));
          for (const [index, entry] of batch.entries()) entry.settle(answers[index]);
        } catch (error) {
          if (batch.length === 1 || isConnectionError(error)) {
            for (const entry of batch) entry.settle(undefined, error ?? new Error("statement failed"));
            continue;
          }
          for (const entry of batch)
            await this.#send([entry.item]).then(
              (answers) => entry.settle(answers[0]),
              (itemError: unknown) => entry.settle(undefined, itemError ?? new Error("statement failed")),
            );
        }
      }
    } finally {
      this.#sending = false;
    }
  }
}

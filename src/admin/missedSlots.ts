import { type SchedulerEventSource, Subscriptions } from "../observability/subscriptions.js";
import type { Logger } from "../scheduler/logger.js";

export interface MissedSlot {
  scheduledAt: Date | null;
  detectedAt: Date;
  reason: string;
}

/**
 * The last missed slot of each task as this instance detected it (`missed-slot` events), until a
 * later run of the task starts: the admin API shows it, and `cronwarden status` exits 3 on it.
 */
export class MissedSlotTracker {
  readonly #missed = new Map<string, MissedSlot>();
  readonly #subscriptions: Subscriptions;

  constructor(scheduler: SchedulerEventSource, logger: Logger) {
    this.#subscriptions = new Subscriptions(scheduler, (event, error) =>
      logger.warn({ err: error, event }, `admin API: the ${event} listener failed`),
    )
      .on("missed-slot", (event) => {
        this.#missed.set(event.taskName, {
          scheduledAt: event.scheduledAt,
          detectedAt: event.detectedAt,
          reason: event.reason,
        });
      })
      .on("run:started", (event) => {
        const missed = this.#missed.get(event.taskName);
        if (missed && (missed.scheduledAt === null || event.scheduledAt >= missed.scheduledAt)) {
          this.#missed.delete(event.taskName);
        }
      });
  }

  get(taskName: string): MissedSlot | null {
    return this.#missed.get(taskName) ?? null;
  }

  close(): void {
    this.#subscriptions.close();
  }
}

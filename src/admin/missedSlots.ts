import type { Logger } from "../core/logger.js";
import { type SchedulerEventSource, Subscriptions } from "../scheduler/eventSubscriptions.js";

/** What the admin API shows of a task's last missed slot, with when it was detected (the engine reports a MissedSlot: src/engine/engineApi.ts). */
export interface MissedSlotReport {
  scheduledAt: Date | null;
  detectedAt: Date;
  reason: string;
}

/**
 * The last missed slot of each task as this instance detected it (`missed-slot` events), until a
 * run of that slot or a later one has finished: the admin API shows it, and `cronwarden status`
 * exits 3 on it. Not cleared when that run merely starts: the detector starts the missed slot's
 * catch-up run at once (src/engine/missedSlotDetector.ts), so a report cleared on start would be
 * visible for milliseconds, and a catch-up run that then fails or dies would hide the miss.
 */
export class MissedSlotTracker {
  readonly #missed = new Map<string, MissedSlotReport>();
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
      .on("run:finished", (event) => {
        if (!event.final) return;
        const missed = this.#missed.get(event.taskName);
        if (missed && (missed.scheduledAt === null || event.scheduledAt >= missed.scheduledAt)) {
          this.#missed.delete(event.taskName);
        }
      });
  }

  get(taskName: string): MissedSlotReport | null {
    return this.#missed.get(taskName) ?? null;
  }

  close(): void {
    this.#subscriptions.close();
  }
}

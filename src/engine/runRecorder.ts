import type { PostgresJobLogger } from "@agendajs/postgres-backend";
import type { JobLogEntry, JobLogger, JobLogQuery, JobLogQueryResult } from "agenda";
import type { Logger } from "../scheduler/logger.js";
import type { RunLedger } from "./runLedger.js";

/**
 * Agenda's persistent job log (`agenda_logs`), with each run's identity added to the rows
 * Agenda writes: the slot, the instance, the attempt and the outcome go into `meta`, so one
 * `success`/`fail` row holds the whole run record (task, slot, start, end, duration, outcome,
 * error). Agenda writes these rows fire-and-forget; `flush()` waits for them before shutdown.
 */
export class RunRecorder implements JobLogger {
  readonly #inner: PostgresJobLogger;
  readonly #ledger: RunLedger;
  readonly #instanceId: string;
  readonly #logger: Logger;
  readonly #pending = new Set<Promise<void>>();

  constructor(inner: PostgresJobLogger, ledger: RunLedger, instanceId: string, logger: Logger) {
    this.#inner = inner;
    this.#ledger = ledger;
    this.#instanceId = instanceId;
    this.#logger = logger;
  }

  log(entry: Omit<JobLogEntry, "_id">): Promise<void> {
    const write = this.#inner.log(this.#enrich(entry)).catch((error: unknown) => {
      this.#logger.warn(
        { err: error, task: entry.jobName, event: entry.event },
        "could not write the run log row",
      );
    });
    this.#pending.add(write);
    void write.finally(() => this.#pending.delete(write));
    if (entry.event === "complete" && entry.jobId) this.#ledger.forget(entry.jobId);
    return write;
  }

  getLogs(query?: JobLogQuery): Promise<JobLogQueryResult> {
    return this.#inner.getLogs(query);
  }

  clearLogs(query?: JobLogQuery): Promise<number> {
    return this.#inner.clearLogs(query);
  }

  async flush(): Promise<void> {
    while (this.#pending.size > 0) await Promise.allSettled([...this.#pending]);
  }

  #enrich(entry: Omit<JobLogEntry, "_id">): Omit<JobLogEntry, "_id"> {
    const run = entry.jobId ? this.#ledger.get(entry.jobId) : undefined;
    if (!run) return entry;
    const meta: Record<string, unknown> = {
      ...entry.meta,
      scheduledAt: run.scheduledAt.toISOString(),
      instanceId: this.#instanceId,
    };
    if (run.attempt !== undefined) meta.attempt = run.attempt;
    if (run.rerun) meta.rerun = true;
    if (entry.event === "success" || entry.event === "fail") {
      if (run.startedAt) meta.startedAt = run.startedAt.toISOString();
      meta.finishedAt = entry.timestamp.toISOString();
      meta.outcome = run.outcome ?? (entry.event === "success" ? "succeeded" : "failed");
      if (run.detail) meta.detail = run.detail;
    }
    // Agenda records no duration on a failed run
    const duration =
      entry.duration ??
      (entry.event === "fail" && run.startedAt
        ? entry.timestamp.getTime() - run.startedAt.getTime()
        : undefined);
    return { ...entry, meta, duration };
  }
}

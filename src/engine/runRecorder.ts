import type { PostgresJobLogger } from "@agendajs/postgres-backend";
import type { JobLogEntry, JobLogger, JobLogQuery, JobLogQueryResult } from "agenda";
import type { Logger } from "../scheduler/logger.js";
import { retryWhileDisconnected } from "./retry.js";
import { journalMeta, type RunJournal } from "./runJournal.js";
import type { RunEntry, RunLedger } from "./runLedger.js";
import { isStaleStart } from "./staleStart.js";

/** How long a run log row is retried while the database is unreachable. */
const LOG_RETRY_MS = 10 * 60_000;

/**
 * Agenda events not written as rows: `locked` (every pre-lock, before the run exists) and
 * `complete` (repeats the `success`/`fail` row). Each was one more INSERT per run, and a run's
 * history, status and the re-run detection read `start`, `success`, `fail` and `retry` only.
 */
const UNRECORDED_EVENTS = new Set(["locked", "complete"]);

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
    if (entry.event === "complete" && entry.jobId) this.#ledger.forget(entry.jobId);
    if (UNRECORDED_EVENTS.has(entry.event) || isStaleStart(entry.error)) return Promise.resolve();
    const enriched = this.#enrich(entry);
    const write = retryWhileDisconnected(() => this.#inner.log(enriched), {
      maxElapsedMs: LOG_RETRY_MS,
    }).catch((error: unknown) => {
      this.#logger.warn(
        { err: error, task: entry.jobName, event: entry.event },
        "could not write the run log row",
      );
    });
    this.#pending.add(write);
    void write.finally(() => this.#pending.delete(write));
    return write;
  }

  /** A failed attempt that its retry policy follows with another: its own row in the history. */
  recordFailedAttempt(
    jobId: string,
    taskName: string,
    attempt: { attempt: number; startedAt: Date; error: Error; retryDelayMs: number; journal?: RunJournal },
  ): void {
    const run = this.#ledger.get(jobId);
    const finishedAt = new Date();
    void this.log({
      timestamp: finishedAt,
      level: "warn",
      event: "retry",
      jobId,
      jobName: taskName,
      message: `attempt ${attempt.attempt} failed: ${attempt.error.message}; retry in ${attempt.retryDelayMs} ms`,
      error: attempt.error.message,
      duration: finishedAt.getTime() - attempt.startedAt.getTime(),
      retryDelay: attempt.retryDelayMs,
      retryAttempt: attempt.attempt,
      meta: {
        scheduledAt: run?.scheduledAt.toISOString(),
        instanceId: this.#instanceId,
        attempt: attempt.attempt,
        startedAt: attempt.startedAt.toISOString(),
        finishedAt: finishedAt.toISOString(),
        outcome: "failed",
        ...(run?.trigger === "manual" ? { trigger: "manual" } : {}),
        ...(run?.rerun ? { rerun: true } : {}),
        ...(run ? rerunOfMeta(run) : {}),
        ...journalMeta(attempt.journal, attempt.error),
      },
    });
  }

  getLogs(query?: JobLogQuery): Promise<JobLogQueryResult> {
    return this.#inner.getLogs(query);
  }

  clearLogs(query?: JobLogQuery): Promise<number> {
    return this.#inner.clearLogs(query);
  }

  /** Waits for the rows being written, up to `timeoutMs` (they are retried while the database is down). */
  async flush(timeoutMs = 10_000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (this.#pending.size > 0 && Date.now() < deadline) {
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([
        Promise.allSettled([...this.#pending]),
        new Promise((resolve) => {
          timer = setTimeout(resolve, deadline - Date.now());
        }),
      ]);
      clearTimeout(timer);
    }
    if (this.#pending.size > 0)
      this.#logger.warn({ rows: this.#pending.size }, "run log rows still unwritten at shutdown");
  }

  #enrich(entry: Omit<JobLogEntry, "_id">): Omit<JobLogEntry, "_id"> {
    const run = entry.jobId ? this.#ledger.get(entry.jobId) : undefined;
    if (!run || entry.event === "retry") return entry;
    const isOutcome = entry.event === "success" || entry.event === "fail";
    if (isOutcome && run.recorded) {
      // Agenda can report a run twice (its own expiry check fails a run whose end is still being
      // saved): the run record is the first outcome row; later ones keep Agenda's text only
      return {
        ...entry,
        meta: { ...entry.meta, instanceId: this.#instanceId, duplicateOf: run.scheduledAt.toISOString() },
      };
    }
    const meta: Record<string, unknown> = {
      ...entry.meta,
      scheduledAt: run.scheduledAt.toISOString(),
      instanceId: this.#instanceId,
    };
    if (run.attempt !== undefined) meta.attempt = run.attempt;
    if (run.rerun) meta.rerun = true;
    if (run.trigger === "manual") meta.trigger = "manual";
    if (!isOutcome) return { ...entry, meta };
    run.recorded = true;
    if (run.startedAt) meta.startedAt = run.startedAt.toISOString();
    meta.finishedAt = entry.timestamp.toISOString();
    meta.outcome = run.outcome ?? (entry.event === "success" ? "succeeded" : "failed");
    if (run.detail) meta.detail = run.detail;
    Object.assign(meta, rerunOfMeta(run), journalMeta(run.journal, run.error));
    // Agenda records no duration on a failed run
    const duration =
      entry.duration ??
      (entry.event === "fail" && run.startedAt
        ? entry.timestamp.getTime() - run.startedAt.getTime()
        : undefined);
    return { ...entry, meta, duration };
  }
}

/** The run a re-run repeats (its start and instance), for the run detail and the timeline. */
function rerunOfMeta(run: RunEntry): Record<string, unknown> {
  if (!run.rerunOf) return {};
  return {
    rerunOf: { startedAt: run.rerunOf.startedAt.toISOString(), instanceId: run.rerunOf.instanceId },
  };
}

import type { PostgresJobLogger } from "@agendajs/postgres-backend";
import type { JobLogEntry, JobLogger, JobLogQuery, JobLogQueryResult } from "agenda";
import { type Clock, systemClock } from "../core/clock.js";
import type { Logger } from "../core/logger.js";
import { redactSecrets, redactValue } from "../observability/redact.js";
import { retryWhileDisconnected } from "./retry.js";
import { journalMeta, type RunJournal } from "./runJournal.js";
import { decodeRunMeta, encodeRunMeta, type RunLogMeta } from "./runLogMeta.js";
import type { RecordedRun } from "./slotRun.js";
import type { RunLogInsert } from "./sql/runLog.js";
import { isNotStarted } from "./staleStart.js";
import type { StatementBatch } from "./statementBatch.js";

/** How long a run log row is retried while the database is unreachable. */
const LOG_RETRY_MS = 10 * 60_000;

/**
 * Agenda events not written as rows: `locked` (every pre-lock, before the run exists) and
 * `complete` (repeats the `success`/`fail` row). Each was one more INSERT per run, and a run's
 * history, status and the re-run detection read `start`, `success`, `fail` and `retry` only.
 * Agenda's `start` is not written either: it comes before the engine's last checks (the run may
 * still be skipped or not start at all) and before a re-run's slot is known; the task runner
 * writes the start row itself when the handler starts (`recordStart`).
 */
const UNRECORDED_EVENTS = new Set(["locked", "complete", "start"]);

/**
 * Agenda's persistent job log (`agenda_logs`), with each run's identity added to the rows
 * Agenda writes: the slot, the instance, the attempt and the outcome go into `meta`, so one
 * `success`/`fail` row holds the whole run record (task, slot, start, end, duration, outcome,
 * error). Start, retry and outcome rows of a run carry the same identity (slot, attempt, trigger,
 * re-run mark) from the run (src/engine/slotRun.ts), set before the handler starts. Rows are written in batches
 * (src/engine/statementBatch.ts). Rows whose error says the run
 * never started (src/engine/staleStart.ts) are not written: they are not failures of the task.
 * Every row's text is redacted (src/observability/redact.ts) before it is written. Rows are
 * written fire-and-forget, retried while the database is unreachable; `flush()` waits for them.
 */
/** The recorder's view of the engine's runs (src/engine/runLedger.ts): read them, and drop one once it is complete. */
export interface RecordedRuns {
  get(jobId: string): RecordedRun | undefined;
  forget(jobId: string): void;
}

export class RunRecorder implements JobLogger {
  readonly #inner: PostgresJobLogger;
  readonly #ledger: RecordedRuns;
  readonly #instanceId: string;
  readonly #logger: Logger;
  readonly #pending = new Set<Promise<void>>();
  readonly #batch: StatementBatch<RunLogInsert, unknown> | undefined;
  /** The engine's clock: the times of the rows the recorder stamps itself (src/core/clock.ts). */
  readonly #clock: Clock;
  /** Called once a run's outcome row is written (task dependencies decide on the written record). */
  onOutcome: ((taskName: string, meta: RunLogMeta) => void) | undefined;

  /** `batch` writes the rows (several runs' rows in one statement); without it, Agenda's logger does, a row at a time. */
  constructor(
    inner: PostgresJobLogger,
    ledger: RecordedRuns,
    instanceId: string,
    logger: Logger,
    batch?: StatementBatch<RunLogInsert, unknown>,
    clock: Clock = systemClock,
  ) {
    this.#clock = clock;
    this.#inner = inner;
    this.#batch = batch;
    this.#ledger = ledger;
    this.#instanceId = instanceId;
    this.#logger = logger;
  }

  log(entry: Omit<JobLogEntry, "_id">): Promise<void> {
    if (entry.event === "complete" && entry.jobId) this.#ledger.forget(entry.jobId);
    if (UNRECORDED_EVENTS.has(entry.event) || isNotStarted(entry.error)) return Promise.resolve();
    const enriched = this.#enrich(entry);
    if (!enriched) return Promise.resolve();
    const written = this.#write(enriched);
    const onOutcome = this.onOutcome;
    if (onOutcome && (enriched.event === "success" || enriched.event === "fail") && enriched.meta)
      void written.then(() => onOutcome(enriched.jobName, decodeRunMeta(enriched.meta)));
    return written;
  }

  /** The handler of a run is about to start (its first attempt): the run's `start` row. */
  recordStart(jobId: string, taskName: string): void {
    const run = this.#ledger.get(jobId);
    if (!run) return;
    const startedAt = run.startedAt ?? new Date(this.#clock());
    void this.#write({
      timestamp: startedAt,
      level: "info",
      event: "start",
      jobId,
      jobName: taskName,
      message: "job started",
      agendaName: this.#instanceId,
      meta: encodeRunMeta({ ...this.#identity(run), ...rerunOfMeta(run), startedAt }),
    });
  }

  /**
   * Slots the catch-up policy skipped (besides the run's own): one `skipped` run record each,
   * without a start. `more` is the count of skipped slots not listed, named on the last record.
   */
  recordSkippedSlots(
    jobId: string,
    taskName: string,
    slots: Date[],
    reason: string,
    more: string | null,
  ): Promise<void> {
    const finishedAt = new Date(this.#clock());
    const writes = slots.map((slot, index) => {
      const detail = more && index === slots.length - 1 ? `${reason} (${more})` : reason;
      return this.#write({
        timestamp: finishedAt,
        level: "info",
        event: "success",
        jobId,
        jobName: taskName,
        message: `slot skipped: ${detail}`,
        agendaName: this.#instanceId,
        meta: encodeRunMeta({
          scheduledAt: slot,
          instanceId: this.#instanceId,
          finishedAt,
          outcome: "skipped",
          detail,
        }),
      });
    });
    return Promise.all(writes).then(() => {});
  }

  #write(entry: Omit<JobLogEntry, "_id">): Promise<void> {
    const redacted: Omit<JobLogEntry, "_id"> = {
      ...entry,
      message: redactSecrets(entry.message),
      ...(entry.error === undefined ? {} : { error: redactSecrets(entry.error) }),
      ...(entry.meta === undefined ? {} : { meta: redactValue(entry.meta) }),
    };
    const batch = this.#batch;
    const write = retryWhileDisconnected(
      () => (batch ? batch.submit(redacted).then(() => {}) : this.#inner.log(redacted)),
      {
        maxElapsedMs: LOG_RETRY_MS,
      },
    ).catch((error: unknown) => {
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
    attempt: {
      attempt: number;
      startedAt: Date;
      endedAt: Date;
      error: Error;
      retryDelayMs: number;
      journal?: RunJournal;
    },
  ): void {
    const run = this.#ledger.get(jobId);
    const finishedAt = attempt.endedAt;
    void this.log({
      timestamp: new Date(this.#clock()),
      level: "warn",
      event: "retry",
      jobId,
      jobName: taskName,
      message: `attempt ${attempt.attempt} failed: ${attempt.error.message}; retry in ${attempt.retryDelayMs} ms`,
      error: attempt.error.message,
      duration: finishedAt.getTime() - attempt.startedAt.getTime(),
      retryDelay: attempt.retryDelayMs,
      retryAttempt: attempt.attempt,
      meta: encodeRunMeta({
        ...(run ? this.#identity(run) : { instanceId: this.#instanceId }),
        attempt: attempt.attempt,
        startedAt: attempt.startedAt,
        finishedAt,
        outcome: "failed",
        ...(run ? rerunOfMeta(run) : {}),
        ...journalMeta(attempt.journal, attempt.error),
      }),
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

  /** What every row of a run says about which run it is: the slot, the instance, the attempt, the marks. */
  #identity(run: RecordedRun): RunLogMeta {
    return {
      scheduledAt: run.scheduledAt,
      instanceId: this.#instanceId,
      ...(run.attempt !== undefined ? { attempt: run.attempt } : {}),
      ...(run.rerun ? { rerun: true } : {}),
      ...(run.trigger === "manual" ? { trigger: "manual" } : {}),
      ...(run.trigger === "manual" && run.requestedBy ? { requestedBy: run.requestedBy } : {}),
      ...(run.upstreams ? { upstreams: run.upstreams } : {}),
    };
  }

  #enrich(entry: Omit<JobLogEntry, "_id">): Omit<JobLogEntry, "_id"> | undefined {
    const run = entry.jobId ? this.#ledger.get(entry.jobId) : undefined;
    if (!run || entry.event === "retry") return entry;
    const isOutcome = entry.event === "success" || entry.event === "fail";
    if (isOutcome && run.recorded) {
      // Agenda can report a run twice: its own liveness check fails a run whose end is still
      // being saved (the save is retried through a database outage, and Agenda clears the job's
      // lock time before it). The run record is the first outcome row; the second is not a run.
      this.#logger.debug(
        { task: entry.jobName, slot: run.scheduledAt, event: entry.event, error: entry.error },
        "a second outcome reported for a recorded run; not written",
      );
      return undefined;
    }
    const identity = this.#identity(run);
    if (!isOutcome) return { ...entry, meta: encodeRunMeta(identity) };
    run.outcomeRecorded();
    // the handler's end, not the moment Agenda reports it: a run started at its slot reports after
    // a quiet spell (src/engine/slotWait.ts, QUIET_AFTER_SLOT_MS). The row's timestamp stays the
    // report's: a job's rows keep the order the engine wrote them in (the skipped slots that the
    // overlap rule records at a run's end come before the run's own row)
    const finishedAt = run.endedAt ?? entry.timestamp;
    const meta = encodeRunMeta({
      ...identity,
      ...(run.startedAt ? { startedAt: run.startedAt } : {}),
      finishedAt,
      outcome: run.outcome ?? (entry.event === "success" ? "succeeded" : "failed"),
      ...(run.detail ? { detail: run.detail } : {}),
      ...rerunOfMeta(run),
      ...journalMeta(run.journal, run.error),
    });
    // Agenda records no duration on a failed run, and its success duration ends when it reports
    const duration =
      run.endedAt && run.startedAt
        ? finishedAt.getTime() - run.startedAt.getTime()
        : (entry.duration ??
          (entry.event === "fail" && run.startedAt
            ? entry.timestamp.getTime() - run.startedAt.getTime()
            : undefined));
    return { ...entry, meta, duration };
  }
}

/** The run a re-run repeats (its start and instance), for the run detail and the timeline. */
function rerunOfMeta(run: RecordedRun): Pick<RunLogMeta, "rerunOf"> {
  if (!run.rerunOf) return {};
  return { rerunOf: { startedAt: run.rerunOf.startedAt, instanceId: run.rerunOf.instanceId } };
}

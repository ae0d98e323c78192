import { randomUUID } from "node:crypto";
import type { PostgresJobLogger } from "@agendajs/postgres-backend";
import type { JobLogEntry } from "agenda";
import type { Clock } from "../core/clock.js";
import type { Logger } from "../core/logger.js";
import { retryWhileDisconnected } from "../db/retry.js";
import type { StatementBatch } from "../db/statementBatch.js";
import { redactSecrets, redactValue } from "../observability/redact.js";
import { journalMeta, type RunJournal } from "./runJournal.js";
import { decodeRunMeta, encodeRunMeta, type RunLogMeta } from "./runLogMeta.js";
import type { RecordedRun } from "./slotRun.js";
import type { RunLogInsert } from "./sql/runLog.js";

/** How long a run log row is retried while the database is unreachable. */
const LOG_RETRY_MS = 10 * 60_000;

/** How a run ended, for its outcome row (Agenda's `success` or `fail` event, with the run's record in `meta`). */
export interface RunEnding {
  /** Agenda's event: `success` for a run that succeeded or was skipped, `fail` otherwise. */
  succeeded: boolean;
  error?: Error | undefined;
  /** When the run was reported over (the row's timestamp). */
  reportedAt: Date;
  /** The start Agenda records in the row (`last_run_at`): the duration of a skipped slot counts from it. */
  lastRunAt?: Date | undefined;
  failCount?: number | undefined;
}

/**
 * Writes a run's rows into Agenda's persistent job log (`agenda_logs`): its `start` row when the
 * handler starts, a `retry` row per failed attempt followed by another, and one outcome row
 * (`success`/`fail`) holding the whole run record: task, slot, start, end, duration, outcome,
 * error, the instance, the attempt, the trigger, the re-run mark, the upstreams (in `meta`,
 * src/engine/runLogMeta.ts). The outcome row replaces the start row (same id): a `start` row is a
 * run in progress, or one that never finished (its instance died), and a finished run costs one
 * row, its start kept in the record's `startedAt` (docs/operations.md, "Run history"). Each is asked for by the run's owner (src/engine/slotRunner.ts) with
 * the run itself. Rows are written in batches (src/db/statementBatch.ts), every row's text
 * redacted (src/observability/redact.ts), fire-and-forget, retried while the database is
 * unreachable; `flush()` waits for them.
 */
export class RunRecorder {
  readonly #inner: PostgresJobLogger;
  readonly #instanceId: string;
  readonly #logger: Logger;
  readonly #pending = new Set<Promise<void>>();
  readonly #batch: StatementBatch<RunLogInsert, unknown> | undefined;
  /** The engine's clock: the times of the rows the recorder stamps itself (src/core/clock.ts). */
  readonly #clock: Clock;
  /** The id of each run's start row, for its outcome row to replace. */
  readonly #startRows = new WeakMap<RecordedRun, string>();
  /** Called once a run's outcome row is written (task dependencies decide on the written record). */
  onOutcome: ((taskName: string, meta: RunLogMeta) => void) | undefined;

  /** `batch` writes the rows (several runs' rows in one statement); without it, Agenda's logger does, a row at a time. */
  constructor(
    inner: PostgresJobLogger,
    instanceId: string,
    logger: Logger,
    batch: StatementBatch<RunLogInsert, unknown> | undefined,
    clock: Clock,
  ) {
    this.#clock = clock;
    this.#inner = inner;
    this.#batch = batch;
    this.#instanceId = instanceId;
    this.#logger = logger;
  }

  /** The handler of a run is about to start (its first attempt): the run's `start` row. */
  recordStart(run: RecordedRun): void {
    const startedAt = run.startedAt ?? new Date(this.#clock.now());
    const id = randomUUID();
    this.#startRows.set(run, id);
    void this.#write({
      id,
      timestamp: startedAt,
      level: "info",
      event: "start",
      jobId: run.jobId,
      jobName: run.taskName,
      message: "job started",
      agendaName: this.#instanceId,
      meta: encodeRunMeta({ ...this.#identity(run), ...rerunOfMeta(run), startedAt }),
    });
  }

  /**
   * The run's outcome row, once (a run whose dead predecessor had recorded the slot writes none).
   * Its `finishedAt` is the handler's end, not the report's: a run started at its slot reports
   * after a quiet spell (src/engine/slotWait.ts). The row's timestamp stays the report's, so a
   * job's rows keep the order the engine wrote them in (the skipped slots that the overlap rule
   * records at a run's end come before the run's own row).
   */
  recordOutcome(run: RecordedRun, ending: RunEnding): Promise<void> {
    const replaces = this.#startRows.get(run);
    this.#startRows.delete(run);
    if (run.recorded) return Promise.resolve();
    run.outcomeRecorded();
    const finishedAt = run.endedAt ?? ending.reportedAt;
    const meta = encodeRunMeta({
      ...this.#identity(run),
      ...(run.startedAt ? { startedAt: run.startedAt } : {}),
      finishedAt,
      outcome: run.outcome ?? (ending.succeeded ? "succeeded" : "failed"),
      ...(run.detail ? { detail: run.detail } : {}),
      ...rerunOfMeta(run),
      ...journalMeta(run.journal, run.error),
      ...(replaces ? { started: true as const } : {}),
    });
    const from = run.endedAt ? run.startedAt : ending.succeeded ? ending.lastRunAt : run.startedAt;
    const duration = from ? finishedAt.getTime() - from.getTime() : undefined;
    const message = ending.error?.message ?? "";
    const written = this.#write({
      ...(replaces ? { replaces } : {}),
      timestamp: ending.reportedAt,
      level: ending.succeeded ? "info" : "error",
      event: ending.succeeded ? "success" : "fail",
      jobId: run.jobId,
      jobName: run.taskName,
      message: ending.succeeded ? "job succeeded" : `job failed: ${message}`,
      agendaName: this.#instanceId,
      ...(ending.succeeded ? {} : { error: message, failCount: ending.failCount }),
      ...(duration === undefined ? {} : { duration }),
      meta,
    });
    const onOutcome = this.onOutcome;
    if (onOutcome) void written.then(() => onOutcome(run.taskName, decodeRunMeta(meta)));
    return written;
  }

  /**
   * Slots a policy skipped (besides the run's own): one `skipped` run record each, without a
   * start. `more` is the count of skipped slots not listed, named on the last record.
   */
  recordSkippedSlots(run: RecordedRun, slots: Date[], reason: string, more: string | null): Promise<void> {
    const finishedAt = new Date(this.#clock.now());
    const writes = slots.map((slot, index) => {
      const detail = more && index === slots.length - 1 ? `${reason} (${more})` : reason;
      return this.#write({
        timestamp: finishedAt,
        level: "info",
        event: "success",
        jobId: run.jobId,
        jobName: run.taskName,
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

  #write(entry: Omit<JobLogEntry, "_id"> & Pick<RunLogInsert, "id" | "replaces">): Promise<void> {
    const redacted: Omit<JobLogEntry, "_id"> & Pick<RunLogInsert, "id" | "replaces"> = {
      ...entry,
      message: redactSecrets(entry.message),
      ...(entry.error === undefined ? {} : { error: redactSecrets(entry.error) }),
      ...(entry.meta === undefined ? {} : { meta: redactValue(entry.meta) }),
    };
    const batch = this.#batch;
    // its id is chosen once (a start's is its run's, a record that replaces a start takes the
    // start's): a retry after a lost answer does not write the row twice (src/engine/sql/runLog.ts)
    const row: RunLogInsert = { ...redacted, id: redacted.replaces ?? redacted.id ?? randomUUID() };
    const write = retryWhileDisconnected(
      () => (batch ? batch.submit(row).then(() => {}) : this.#inner.log(withoutIds(redacted))),
      { clock: this.#clock, maxElapsedMs: LOG_RETRY_MS },
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
    run: RecordedRun,
    attempt: {
      attempt: number;
      startedAt: Date;
      endedAt: Date;
      error: Error;
      retryDelayMs: number;
      journal?: RunJournal;
    },
  ): void {
    const finishedAt = attempt.endedAt;
    void this.#write({
      timestamp: new Date(this.#clock.now()),
      level: "warn",
      event: "retry",
      jobId: run.jobId,
      jobName: run.taskName,
      message: `attempt ${attempt.attempt} failed: ${attempt.error.message}; retry in ${attempt.retryDelayMs} ms`,
      error: attempt.error.message,
      duration: finishedAt.getTime() - attempt.startedAt.getTime(),
      retryDelay: attempt.retryDelayMs,
      retryAttempt: attempt.attempt,
      agendaName: this.#instanceId,
      meta: encodeRunMeta({
        ...this.#identity(run),
        attempt: attempt.attempt,
        startedAt: attempt.startedAt,
        finishedAt,
        outcome: "failed",
        ...rerunOfMeta(run),
        ...journalMeta(attempt.journal, attempt.error),
      }),
    });
  }

  /** Waits for the rows being written, up to `timeoutMs` (they are retried while the database is down). */
  async flush(timeoutMs = 10_000): Promise<void> {
    const clock = this.#clock;
    const deadline = clock.monotonic() + timeoutMs;
    while (this.#pending.size > 0 && clock.monotonic() < deadline) {
      const waited = new AbortController();
      await Promise.race([
        Promise.allSettled([...this.#pending]),
        clock.sleep(deadline - clock.monotonic(), waited.signal),
      ]);
      waited.abort(); // the sleep's timer goes
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
      ...(run.trigger && run.trigger !== "schedule" ? { trigger: run.trigger } : {}),
      ...(run.trigger && run.trigger !== "schedule" && run.requestedBy
        ? { requestedBy: run.requestedBy }
        : {}),
      ...(run.upstreams ? { upstreams: run.upstreams } : {}),
      ...(run.traceparent ? { traceparent: run.traceparent } : {}),
    };
  }
}

/** A row for Agenda's own logger, which chooses its ids and replaces nothing (two rows per run). */
function withoutIds(
  entry: Omit<JobLogEntry, "_id"> & Pick<RunLogInsert, "id" | "replaces">,
): Omit<JobLogEntry, "_id"> {
  const { id: _id, replaces: _replaces, ...row } = entry;
  return row;
}

/** The run a re-run repeats (its start and instance), for the run detail and the timeline. */
function rerunOfMeta(run: RecordedRun): Pick<RunLogMeta, "rerunOf"> {
  if (!run.rerunOf) return {};
  return { rerunOf: { startedAt: run.rerunOf.startedAt, instanceId: run.rerunOf.instanceId } };
}

import type { Job, JobParameters } from "agenda";

/** One answer of Agenda's next-run computation and the start times it holds for. */
interface KnownNextRun {
  /** The first and last `lastRunAt` (ms, both inclusive) the answer was checked for. */
  from: number;
  to: number;
  nextRunAt: number;
}

/** Schedules whose answers are kept; more are forgotten at once (a herd shares one). */
const MAX_SCHEDULES = 1_000;

/**
 * Agenda's next run of a repeating job worked out when the job is claimed, ahead of its slot,
 * instead of when it starts. The run's owner (src/engine/slotRunner.ts) computes it just before the start save (cron-parser and
 * luxon, about 3 ms of the path from the slot to the handler on a cold minute), and in a herd it
 * is a large part of each run's CPU, all of it at the boundary.
 *
 * The value stays Agenda's own: `Job#computeNextRunAt` is evaluated at the claim for
 * lastRunAt = the due time, giving N, and for lastRunAt = N - 1 ms. The answer does not decrease
 * as lastRunAt grows (a cron's first slot after it, or lastRunAt plus an interval, then the date
 * constraints), so when both give N it is N for every start time between them; a run that starts
 * there gets N without computing, any other start calls Agenda's computation as before. An
 * interval (`every`) never passes the check: its answer moves with the start time. Jobs with the
 * same schedule share the checked answer, so a herd computes it once.
 */
export class NextRunAhead {
  readonly #known = new Map<string, KnownNextRun>();

  /**
   * Makes `job.computeNextRunAt()` use the answer checked for its schedule around `dueAt`. A run
   * handed over before `dueAt` (src/engine/claimLoop.ts, startAheadMs) starts its handler at
   * `dueAt`: that is the start the row records (`lastRunAt`, set by the run's owner just before it
   * computes the next run), so the next run is the slot after this one, never this one again.
   */
  prepare(job: Job, dueAt: number): void {
    const answer = this.#answer(job, dueAt);
    // private in agenda's types (6.2.6, pinned), called by the run's owner on the job itself
    const computing = job as unknown as ComputesNextRun;
    const agendas = computing.computeNextRunAt;
    computing.computeNextRunAt = function (this: ComputesNextRun) {
      let startedAt = this.attrs.lastRunAt?.getTime();
      if (startedAt !== undefined && startedAt < dueAt) {
        this.attrs.lastRunAt = new Date(dueAt);
        startedAt = dueAt;
      }
      if (!answer || startedAt === undefined || startedAt < answer.from || startedAt > answer.to)
        return agendas.call(this);
      this.attrs.nextRunAt = new Date(answer.nextRunAt);
      return this;
    };
  }

  #answer(job: Job, dueAt: number): KnownNextRun | undefined {
    const attrs = job.attrs;
    if (attrs.repeatInterval === undefined || attrs.repeatInterval === null || attrs.repeatAt)
      return undefined;
    const key = scheduleKey(attrs);
    const known = this.#known.get(key);
    if (known && dueAt >= known.from && dueAt <= known.to) return known;
    const checked = check(job, dueAt);
    if (!checked) return undefined;
    if (this.#known.size >= MAX_SCHEDULES) this.#known.clear();
    this.#known.set(key, checked);
    return checked;
  }
}

interface ComputesNextRun {
  attrs: JobParameters;
  computeNextRunAt(this: ComputesNextRun): unknown;
}

/** What Agenda's computation reads of a row besides lastRunAt. */
function scheduleKey(attrs: JobParameters): string {
  return JSON.stringify([
    attrs.repeatInterval,
    attrs.repeatTimezone ?? null,
    attrs.startDate ?? null,
    attrs.endDate ?? null,
    attrs.skipDays ?? null,
  ]);
}

/** Agenda's answer for lastRunAt = `dueAt`, if it is the same up to the next run itself. */
function check(job: Job, dueAt: number): KnownNextRun | undefined {
  const first = agendasNextRun(job, dueAt);
  if (first === undefined || first <= dueAt) return undefined;
  const last = agendasNextRun(job, first - 1);
  if (last !== first) return undefined;
  return { from: dueAt, to: first - 1, nextRunAt: first };
}

/**
 * `Job#computeNextRunAt` of Agenda for a start at `lastRunAt`, on a copy of the row: undefined when
 * it gives no date or fails (the copy's `fail` is a no-op; the real run calls Agenda's and fails
 * the way Agenda does).
 */
function agendasNextRun(job: Job, lastRunAt: number): number | undefined {
  let failed = false;
  const copy = {
    attrs: { ...job.attrs, lastRunAt: new Date(lastRunAt), nextRunAt: null },
    fail: () => {
      failed = true;
    },
  };
  const prototypeCompute = Object.getPrototypeOf(job).computeNextRunAt as (this: unknown) => unknown;
  try {
    prototypeCompute.call(copy);
  } catch {
    return undefined;
  }
  const next = copy.attrs.nextRunAt as Date | null;
  return failed || !next || Number.isNaN(next.getTime()) ? undefined : next.getTime();
}

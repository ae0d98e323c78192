import type { Agenda } from "agenda";

/** The part of Agenda's job processor (agenda 6.2.6 `dist/JobProcessor.js`) the poll below uses. */
interface AgendaJobProcessor {
  isRunning: boolean;
  nextScanAt: Date;
  processEvery: number;
  process(): Promise<void>;
  jobQueueFilling(name: string): Promise<void>;
  jobProcessing(): unknown;
}

/**
 * Agenda's poll (`JobProcessor.process`) calls `jobQueueFilling` for every defined job name, and
 * each call allocates a few kilobytes (new `debug` loggers, a `Date` turned into a string for a
 * debug line, promises) even when the repository answers at once that the name has nothing to
 * lock: with 10,000 tasks about 19 MB of garbage per second, which V8 lets grow the heap to a few
 * hundred MB before it collects (docs/benchmarks.md, "Memory"). The repository only ever locks
 * names of its lockable list (CronwardenJobRepository.getNextJobToRun), so this poll asks for that
 * list once and fills Agenda's queue for those names only: the same locks, in the list's order
 * (most overdue first, as the refill after a run's end), without the per-name calls that could
 * not lock anything.
 *
 * Returns false (Agenda's own poll stays) when the processor does not have the expected shape,
 * e.g. after an Agenda upgrade.
 */
export function pollLockableNamesOnly(
  agenda: Agenda,
  lockableNames: (nextScanAt: Date) => Promise<string[]>,
): boolean {
  const processor = (agenda as unknown as { jobProcessor?: Partial<AgendaJobProcessor> }).jobProcessor;
  if (
    !processor ||
    typeof processor.process !== "function" ||
    typeof processor.jobQueueFilling !== "function" ||
    typeof processor.jobProcessing !== "function" ||
    typeof processor.processEvery !== "number" ||
    !(processor.nextScanAt instanceof Date)
  )
    return false;
  const poller = processor as AgendaJobProcessor;
  poller.process = async function process(this: AgendaJobProcessor): Promise<void> {
    if (!this.isRunning) return;
    // what each jobQueueFilling call sets: a notification due before it is locked at once
    this.nextScanAt = new Date(Date.now() + this.processEvery);
    let names: string[];
    try {
      names = await lockableNames(this.nextScanAt);
    } catch (error) {
      // Agenda reports a failed lock statement per name; one report per poll says the same
      agenda.emit("error", error);
      return;
    }
    const definitions = agenda.definitions;
    await Promise.all(names.filter((name) => definitions[name]).map((name) => this.jobQueueFilling(name)));
    this.jobProcessing();
  };
  return true;
}

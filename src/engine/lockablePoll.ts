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
 * Starts Agenda with the poll below. Agenda's job processor runs its first poll inside its
 * constructor, in `agenda.start()`: that one would still call `jobQueueFilling` for every name,
 * all at once (10,000 pending calls of a few kilobytes each, alive together until the statement
 * they share returns, so V8 promotes them to the old generation: the largest single step of the
 * heap's growth at start). Agenda sees no definitions during its own start (nothing runs yet: the
 * processor is created at its end), and the first poll is this module's, right after.
 */
export async function startWithLockablePoll(
  agenda: Agenda,
  lockableNames: (nextScanAt: Date) => Promise<string[]>,
): Promise<boolean> {
  const writable = agenda as unknown as { definitions: Agenda["definitions"] };
  const definitions = writable.definitions;
  writable.definitions = {};
  try {
    await agenda.start();
  } finally {
    writable.definitions = definitions;
  }
  const processor = (agenda as unknown as { jobProcessor?: Partial<AgendaJobProcessor> }).jobProcessor;
  const patched = pollLockableNamesOnly(agenda, lockableNames);
  void processor?.process?.();
  return patched;
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

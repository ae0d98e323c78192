/**
 * A timezone's UTC offset and where it changes, from the runtime's own zone data (Intl). Facts
 * only: the DST rule that maps cron slots through them is src/core/policies/schedule.ts.
 */

const HOUR_MS = 3_600_000;
const WEEK_MS = 7 * 24 * HOUR_MS;

const formatters = new Map<string, Intl.DateTimeFormat>();

function formatter(timezone: string): Intl.DateTimeFormat {
  let format = formatters.get(timezone);
  if (!format) {
    format = new Intl.DateTimeFormat("en-US", {
      timeZone: timezone,
      hourCycle: "h23",
      year: "numeric",
      month: "numeric",
      day: "numeric",
      hour: "numeric",
      minute: "numeric",
      second: "numeric",
    });
    if (formatters.size > 1_000) formatters.clear();
    formatters.set(timezone, format);
  }
  return format;
}

/** The wall clock of `instant` in `timezone`, as milliseconds of the same wall time in UTC. */
export function wallTime(instant: number, timezone: string): number {
  const parts: Record<string, number> = {};
  for (const part of formatter(timezone).formatToParts(new Date(instant)))
    if (part.type !== "literal") parts[part.type] = Number(part.value);
  const ms = ((instant % 1000) + 1000) % 1000;
  return (
    Date.UTC(
      parts.year ?? 1970,
      (parts.month ?? 1) - 1,
      parts.day ?? 1,
      parts.hour ?? 0,
      parts.minute ?? 0,
      parts.second ?? 0,
    ) + ms
  );
}

/** Whether this runtime knows `timezone` (an IANA name); its formatter is kept, so asking again is cheap. */
export function isKnownTimezone(timezone: string): boolean {
  try {
    formatter(timezone);
    return true;
  } catch {
    return false;
  }
}

/** The UTC offset of `timezone` at `instant`, in ms (wall minus UTC). */
export function offsetAt(instant: number, timezone: string): number {
  return wallTime(instant, timezone) - instant;
}

/**
 * Whether the offset at some instant of [from, to] differs from the one at `from`. Offset changes
 * are months apart: a weekly sample cannot miss a change and its return.
 */
export function offsetChangesBetween(from: number, to: number, timezone: string): boolean {
  const first = offsetAt(from, timezone);
  for (let at = from + WEEK_MS; at < to; at += WEEK_MS) if (offsetAt(at, timezone) !== first) return true;
  return offsetAt(to, timezone) !== first;
}

/** From `at` on (until the next change), the zone is `offset` ms ahead of UTC. */
interface OffsetChange {
  at: number;
  offset: number;
}

/** A span of time over which the zone keeps one offset: the instants [start, end). */
export interface OffsetStretch {
  start: number;
  end: number;
  offset: number;
  /** The offset before `start` when a change starts the stretch; undefined for the first stretch asked. */
  before: number | undefined;
}

/** The zone data is read in blocks of 52 weeks: the offset at the block's start, and its changes. */
const BLOCK_MS = 52 * WEEK_MS;

interface OffsetBlock {
  /** The offset at the block's start. */
  offset: number;
  /** The changes in (start, start + BLOCK_MS], oldest first. */
  changes: OffsetChange[];
}

/** Blocks already read, by timezone and block number: a zone's changes are fixed data. */
const offsetBlocks = new Map<string, OffsetBlock>();

/** Block k holds the instants (k * BLOCK_MS, (k + 1) * BLOCK_MS]. */
function blockNumber(instant: number): number {
  return Math.ceil(instant / BLOCK_MS) - 1;
}

function offsetBlock(timezone: string, block: number): OffsetBlock {
  const key = `${timezone} ${block}`;
  let known = offsetBlocks.get(key);
  if (!known) {
    known = readOffsetBlock(timezone, block * BLOCK_MS);
    if (offsetBlocks.size >= 10_000) offsetBlocks.clear();
    offsetBlocks.set(key, known);
  }
  return known;
}

/** One block's changes: a weekly sample, then the first second of the new offset by bisection. */
function readOffsetBlock(timezone: string, start: number): OffsetBlock {
  const first = offsetAt(start, timezone);
  const changes: OffsetChange[] = [];
  let previous = { at: start, offset: first };
  for (let at = start + WEEK_MS; at <= start + BLOCK_MS; at += WEEK_MS) {
    const offset = offsetAt(at, timezone);
    if (offset !== previous.offset) {
      const change = firstSecondWithOtherOffset(timezone, previous.at, at, previous.offset);
      changes.push({ at: change, offset: offsetAt(change, timezone) });
    }
    previous = { at, offset };
  }
  return { offset: first, changes };
}

/** The first whole second in (low, high] whose offset is not `offset` (at `high` it is not). */
function firstSecondWithOtherOffset(timezone: string, low: number, high: number, offset: number): number {
  let before = low;
  let after = high;
  while (after - before > 1_000) {
    const middle = before + Math.floor((after - before) / 2_000) * 1_000;
    if (offsetAt(middle, timezone) === offset) before = middle;
    else after = middle;
  }
  return after;
}

/** The offset at `instant`, from the block data. */
function offsetInBlocks(timezone: string, instant: number): number {
  const block = offsetBlock(timezone, blockNumber(instant));
  let offset = block.offset;
  for (const change of block.changes) if (change.at <= instant) offset = change.offset;
  return offset;
}

/**
 * The stretches of one offset that cover the instants [from, to], oldest first: the first starts
 * at `from`, each next one at a change. Throws a RangeError for a timezone the runtime does not know.
 */
export function offsetStretches(timezone: string, from: number, to: number): OffsetStretch[] {
  const stretches: OffsetStretch[] = [];
  let current: OffsetStretch = {
    start: from,
    end: to + 1,
    offset: offsetInBlocks(timezone, from),
    before: undefined,
  };
  for (let block = blockNumber(from); block <= blockNumber(to); block++) {
    for (const change of offsetBlock(timezone, block).changes) {
      if (change.at <= from || change.at > to || change.offset === current.offset) continue;
      stretches.push({ ...current, end: change.at });
      current = { start: change.at, end: to + 1, offset: change.offset, before: current.offset };
    }
  }
  stretches.push(current);
  return stretches;
}

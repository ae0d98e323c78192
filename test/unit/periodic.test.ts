import { afterEach, beforeEach, expect, it, vi } from "vitest";
import { PeriodicTimer, POLL_PHASES } from "../../src/core/periodic.js";

beforeEach(() => {
  vi.useFakeTimers();
});

afterEach(() => {
  vi.useRealTimers();
});

it("ticks first at the period plus the phase, then every period, and not after stop()", () => {
  const ticks: number[] = [];
  const started = Date.now();
  const timer = new PeriodicTimer(15_000, 2_500, () => ticks.push(Date.now() - started));
  timer.start();
  vi.advanceTimersByTime(15_000);
  expect(ticks).toEqual([]);
  vi.advanceTimersByTime(2_500);
  expect(ticks).toEqual([17_500]);
  vi.advanceTimersByTime(30_000);
  expect(ticks).toEqual([17_500, 32_500, 47_500]);
  timer.stop();
  expect(timer.running).toBe(false);
  vi.advanceTimersByTime(60_000);
  expect(ticks).toHaveLength(3);
});

it("stop() before the first tick cancels it; a phase of 0 is a plain interval", () => {
  const phased = vi.fn();
  const cancelled = new PeriodicTimer(1_000, 750, phased);
  cancelled.start();
  vi.advanceTimersByTime(1_000);
  cancelled.stop();
  vi.advanceTimersByTime(5_000);
  expect(phased).not.toHaveBeenCalled();

  const plain = vi.fn();
  const interval = new PeriodicTimer(1_000, 0, plain);
  interval.start();
  vi.advanceTimersByTime(3_000);
  expect(plain).toHaveBeenCalledTimes(3);
  interval.stop();
});

it("at the default periods no two periodic statements fall in the same millisecond as the poll or each other", () => {
  const pollMs = 5_000;
  const times = new Map<string, number[]>();
  const record = (name: string) => () => times.set(name, [...(times.get(name) ?? []), Date.now()]);
  const timers = [
    new PeriodicTimer(pollMs, 0, record("poll")),
    new PeriodicTimer(60_000, POLL_PHASES.antiEntropy * pollMs, record("antiEntropy")),
    new PeriodicTimer(15_000, POLL_PHASES.missedSlotCheck * pollMs, record("missedSlotCheck")),
    new PeriodicTimer(1_000, (POLL_PHASES.dependencySweep * pollMs) % 1_000, record("dependencySweep")),
  ];
  for (const timer of timers) timer.start();
  vi.advanceTimersByTime(10 * 60_000 + 2_000);
  for (const timer of timers) timer.stop();
  const all = [...times.values()].flat();
  expect(times.get("antiEntropy")).toHaveLength(10);
  expect(new Set(all).size).toBe(all.length);
});

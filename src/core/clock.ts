/**
 * The time as the engine reads it for its decisions and records: milliseconds since the epoch.
 * The system clock unless a test passes its own (EngineOptions.clock, SchedulerOptions.clock).
 * Timers still wait in real time: a driven clock changes what the engine decides when it wakes,
 * not when it wakes.
 */
export type Clock = () => number;

export const systemClock: Clock = () => Date.now();

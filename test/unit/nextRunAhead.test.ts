import { type Agenda, Job, type JobParameters } from "agenda";
import { afterEach, describe, expect, it, vi } from "vitest";
import { NextRunAhead } from "../../src/engine/nextRunAhead.js";

/**
 * Agenda's next run worked out at the claim (src/engine/nextRunAhead.ts), compared with Agenda's own
 * computation on a job that was not prepared, for starts inside and outside the checked range.
 */

/** A Job seen with the method Agenda's types keep private. */
interface Computing {
  attrs: JobParameters;
  computeNextRunAt(): unknown;
}

function job(attrs: Partial<JobParameters>): Computing {
  return new Job(
    {} as Agenda,
    { name: "t", data: {}, ...attrs } as JobParameters,
    true,
  ) as unknown as Computing;
}

/** Agenda's answer for a start at `startedAt`, from a job nothing was prepared on. */
function agendas(attrs: Partial<JobParameters>, startedAt: number): number | undefined {
  const plain = job({ ...attrs, lastRunAt: new Date(startedAt) });
  plain.computeNextRunAt();
  return plain.attrs.nextRunAt?.getTime();
}

function started(prepared: Computing, at: number): number | undefined {
  prepared.attrs.lastRunAt = new Date(at);
  prepared.computeNextRunAt();
  return prepared.attrs.nextRunAt?.getTime();
}

const due = Date.parse("2026-12-02T10:05:00.000Z");

afterEach(() => {
  vi.restoreAllMocks();
});

describe("NextRunAhead", () => {
  it.each([
    ["a minute cron", { repeatInterval: "* * * * *" }],
    ["a cron in a timezone", { repeatInterval: "*/5 * * * *", repeatTimezone: "Europe/Berlin" }],
    ["a seconds cron", { repeatInterval: "*/20 * * * * *" }],
    ["a cron with an end date", { repeatInterval: "*/5 * * * *", endDate: new Date(due + 4 * 60_000) }],
    ["a human interval", { repeatInterval: "5 minutes" }],
    ["a numeric interval", { repeatInterval: 90_000 as unknown as string }],
  ] as [string, Partial<JobParameters>][])("%s: the same answer as Agenda's for any start", (_, attrs) => {
    const ahead = new NextRunAhead();
    for (const offset of [0, 1, 7, 999, 59_999, 60_000, 60_001, 299_999, 300_000, 301_000, 3_600_000]) {
      const prepared = job({ ...attrs, nextRunAt: new Date(due) });
      ahead.prepare(prepared as unknown as Job, due);
      expect({ offset, next: started(prepared, due + offset) }).toEqual({
        offset,
        next: agendas(attrs, due + offset),
      });
    }
  });

  it("a herd with one schedule asks Agenda twice, at the claim; its starts ask nothing", () => {
    const compute = vi.spyOn(Job.prototype as unknown as Computing, "computeNextRunAt");
    const ahead = new NextRunAhead();
    const herd = Array.from({ length: 100 }, () =>
      job({ repeatInterval: "0 0 3 * * *", nextRunAt: new Date(due) }),
    );
    for (const member of herd) ahead.prepare(member as unknown as Job, due);
    expect(compute).toHaveBeenCalledTimes(2);
    compute.mockClear();
    const answers = new Set(herd.map((member, index) => started(member, due + 2 + index)));
    expect(compute).not.toHaveBeenCalled();
    expect([...answers]).toEqual([Date.parse("2026-12-03T03:00:00.000Z")]);
  });

  it.each([
    ["a minute cron", { repeatInterval: "* * * * *" }, due + 60_000],
    ["a human interval", { repeatInterval: "5 minutes" }, due + 300_000],
  ] as [string, Partial<JobParameters>, number][])(
    "%s handed over before its slot: the start recorded is the slot, and the next run the slot after it",
    (_, attrs, after) => {
      const ahead = new NextRunAhead();
      const prepared = job({ ...attrs, nextRunAt: new Date(due) });
      ahead.prepare(prepared as unknown as Job, due);
      // Job#run sets lastRunAt to the wall clock, here 250 ms before the slot
      expect(started(prepared, due - 250)).toBe(after);
      expect(prepared.attrs.lastRunAt?.getTime()).toBe(due);
      // unprepared, Agenda would have made the slot itself the next run
      expect(agendas(attrs, due - 250)).toBeLessThanOrEqual(due + (after - due) - 250);
    },
  );

  it("an interval is left to Agenda: its answer moves with the start", () => {
    const ahead = new NextRunAhead();
    const prepared = job({ repeatInterval: "5 minutes", nextRunAt: new Date(due) });
    const compute = vi.spyOn(Job.prototype as unknown as Computing, "computeNextRunAt");
    ahead.prepare(prepared as unknown as Job, due);
    compute.mockClear();
    expect(started(prepared, due + 1_234)).toBe(due + 1_234 + 300_000);
    expect(compute).toHaveBeenCalledTimes(1);
  });
});

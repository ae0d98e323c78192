import { describe, expect, it } from "vitest";
import type { Calendar } from "../../src/core/policies/calendar.js";
import { expectedRun } from "../../src/core/policies/expectedRun.js";

/**
 * The task-stopped alert's figures (src/core/policies/expectedRun.ts) with literal inputs: how
 * long ago the run that is due was due, and the expected interval, honouring calendars. The rule
 * (deploy/prometheus/cronwarden-alerts.yml) fires when overdue > interval + 120.
 */

const at = (iso: string) => Date.parse(iso);
const fires = (figures: { overdueSeconds: number; intervalSeconds: number | undefined }) =>
  figures.intervalSeconds !== undefined && figures.overdueSeconds > figures.intervalSeconds + 120;

const holidays: Calendar = { name: "holidays", dates: ["2026-12-25"] };
// Fri 18:00 to Mon 06:00 in minutes from Monday 00:00
const weekend: Calendar = { name: "weekend", weekly: [{ from: 4 * 1440 + 18 * 60, to: 6 * 60 }] };

describe("expectedRun: the task-stopped alert's figures", () => {
  it("without calendars: overdue since the row's next run, the schedule's own interval", () => {
    const figures = expectedRun("0 * * * *", "UTC", at("2026-03-02T10:00:00Z"), at("2026-03-02T10:05:00Z"));
    expect(figures).toEqual({ overdueSeconds: 300, intervalSeconds: 3600 });
    expect(expectedRun("0 * * * *", "UTC", at("2026-03-02T11:00:00Z"), at("2026-03-02T10:05:00Z"))).toEqual({
      overdueSeconds: 0,
      intervalSeconds: 3600,
    });
  });

  const table: Array<{
    name: string;
    schedule: string;
    timezone: string;
    exclude: Calendar[];
    nextRunAt: string;
    now: string;
    overdue: number;
    interval: number | undefined;
    alert: boolean;
  }> = [
    {
      name: "an hourly task stalled on a holiday's first slot does not alert during the holiday (Berlin)",
      schedule: "0 * * * *",
      timezone: "Europe/Berlin",
      exclude: [holidays],
      nextRunAt: "2026-12-25T00:00:00+01:00",
      now: "2026-12-25T12:00:00+01:00",
      overdue: 0, // due at 2026-12-26T00:00 Berlin
      interval: 3600,
      alert: false,
    },
    {
      name: "the same stall alerts once its first run after the holiday is overdue by more than the interval",
      schedule: "0 * * * *",
      timezone: "Europe/Berlin",
      exclude: [holidays],
      nextRunAt: "2026-12-25T00:00:00+01:00",
      now: "2026-12-26T02:30:00+01:00",
      overdue: 9000,
      interval: 3600,
      alert: true,
    },
    {
      name: "a stall on the slot before the holiday is overdue from that slot, holiday or not",
      schedule: "0 * * * *",
      timezone: "Europe/Berlin",
      exclude: [holidays],
      nextRunAt: "2026-12-24T23:00:00+01:00",
      now: "2026-12-25T01:00:00+01:00",
      overdue: 7200,
      interval: 3600,
      alert: true,
    },
    {
      name: "the same calendar in New York is New York's 25 December",
      schedule: "0 * * * *",
      timezone: "America/New_York",
      exclude: [holidays],
      nextRunAt: "2026-12-25T00:00:00-05:00",
      now: "2026-12-25T12:00:00+01:00", // 06:00 in New York: inside its holiday
      overdue: 0,
      interval: 3600,
      alert: false,
    },
    {
      name: "a holiday on a fall-back day (New York, 25 hours): no alert until the next day's first slot is overdue",
      schedule: "0 * * * *",
      timezone: "America/New_York",
      exclude: [{ name: "holidays", dates: ["2026-11-01"] }],
      nextRunAt: "2026-11-01T00:00:00-04:00",
      now: "2026-11-01T23:30:00-05:00",
      overdue: 0,
      interval: 3600,
      alert: false,
    },
    {
      name: "after the fall-back holiday: overdue from 00:00 EST",
      schedule: "0 * * * *",
      timezone: "America/New_York",
      exclude: [{ name: "holidays", dates: ["2026-11-01"] }],
      nextRunAt: "2026-11-01T00:00:00-04:00",
      now: "2026-11-02T01:30:00-05:00",
      overdue: 5400,
      interval: 3600,
      alert: true,
    },
    {
      name: "a minute task stalled in its weekend window: quiet until Monday 06:00, the interval is a minute",
      schedule: "* * * * *",
      timezone: "UTC",
      exclude: [weekend],
      nextRunAt: "2026-03-06T18:00:00Z", // a Friday
      now: "2026-03-08T12:00:00Z",
      overdue: 0,
      interval: 60,
      alert: false,
    },
    {
      name: "an every: schedule honours the window too",
      schedule: "15 minutes",
      timezone: "UTC",
      exclude: [weekend],
      nextRunAt: "2026-03-06T18:00:00Z",
      now: "2026-03-09T06:20:00Z",
      overdue: 1200,
      interval: 900,
      alert: true,
    },
    {
      name: "a calendar that excludes every slot for 3 years: nothing is due, no interval",
      schedule: "0 * * * *",
      timezone: "UTC",
      exclude: [
        { name: "freeze", ranges: [{ from: at("2026-01-01T00:00:00Z"), to: at("2031-01-01T00:00:00Z") }] },
      ],
      nextRunAt: "2026-03-02T10:00:00Z",
      now: "2026-03-05T10:00:00Z",
      overdue: 0,
      interval: undefined,
      alert: false,
    },
  ];

  for (const row of table) {
    it(row.name, () => {
      const figures = expectedRun(row.schedule, row.timezone, at(row.nextRunAt), at(row.now), row.exclude);
      expect(figures).toEqual({ overdueSeconds: row.overdue, intervalSeconds: row.interval });
      expect(fires(figures)).toBe(row.alert);
      // the same stall without the calendar: the raw figures, which alert during an exclusion
      if (!row.alert && row.overdue === 0 && row.interval !== undefined)
        expect(fires(expectedRun(row.schedule, row.timezone, at(row.nextRunAt), at(row.now)))).toBe(true);
    });
  }
});

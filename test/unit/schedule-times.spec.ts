import { describe, expect, it } from '@jest/globals';
import { checkSchedule, nextTicks, ticksToFire, type ScheduleSpec } from '../../lib/core/model/schedule.js';

const iso = (ms: number) => new Date(ms).toISOString();
const ticks = (spec: ScheduleSpec, from: string, count: number) =>
  nextTicks(checkSchedule('s', spec), Date.parse(from), Date.parse(from), count).map(iso);

describe('schedule ticks (croner, no Redis)', () => {
  it('takes 5-field cron and 6-field cron with seconds', () => {
    expect(ticks({ pattern: 'p', cron: '0 3 * * *' }, '2026-11-25T12:00:00Z', 2)).toEqual([
      '2026-11-26T03:00:00.000Z',
      '2026-11-27T03:00:00.000Z',
    ]);
    expect(ticks({ pattern: 'p', cron: '*/15 * * * * *' }, '2026-11-25T12:00:00Z', 3)).toEqual([
      '2026-11-25T12:00:15.000Z',
      '2026-11-25T12:00:30.000Z',
      '2026-11-25T12:00:45.000Z',
    ]);
  });

  it('spring forward (Europe/Berlin, 29 March 2026): a time in the skipped hour runs when the clock jumps, once', () => {
    // 02:30 does not exist that night: the task runs at 03:00 CEST (01:00 UTC), as Vixie cron does.
    expect(ticks({ pattern: 'p', cron: '30 2 * * *', tz: 'Europe/Berlin' }, '2026-03-27T12:00:00Z', 3)).toEqual([
      '2026-03-28T01:30:00.000Z', // 02:30 CET
      '2026-03-29T01:00:00.000Z', // 03:00 CEST
      '2026-03-30T00:30:00.000Z', // 02:30 CEST
    ]);
    // An hourly task has one run less that day (the hour does not exist), none twice.
    expect(ticks({ pattern: 'p', cron: '0 * * * *', tz: 'Europe/Berlin' }, '2026-03-29T00:30:00Z', 2)).toEqual([
      '2026-03-29T01:00:00.000Z', // 03:00 CEST, right after 01:00 CET (00:00 UTC)
      '2026-03-29T02:00:00.000Z',
    ]);
  });

  it('fall back (Europe/Berlin, 25 October 2026): a fixed time in the repeated hour runs once; an hourly task in both hours', () => {
    expect(ticks({ pattern: 'p', cron: '30 2 * * *', tz: 'Europe/Berlin' }, '2026-10-24T12:00:00Z', 2)).toEqual([
      '2026-10-25T00:30:00.000Z', // 02:30 CEST, the first of the two 02:30s
      '2026-10-26T01:30:00.000Z', // 02:30 CET
    ]);
    expect(ticks({ pattern: 'p', cron: '0 * * * *', tz: 'Europe/Berlin' }, '2026-10-24T23:30:00Z', 3)).toEqual([
      '2026-10-25T00:00:00.000Z', // 02:00 CEST
      '2026-10-25T01:00:00.000Z', // 02:00 CET
      '2026-10-25T02:00:00.000Z', // 03:00 CET
    ]);
  });

  it('counts an everyMs rhythm from startAt, and stops after endAt', () => {
    const startAt = Date.parse('2026-11-25T12:00:00Z');
    const spec = checkSchedule('s', { pattern: 'p', everyMs: 60_000, startAt, endAt: startAt + 120_000 });
    expect(nextTicks(spec, startAt - 5_000, 0, 5).map(iso)).toEqual([
      '2026-11-25T12:00:00.000Z',
      '2026-11-25T12:01:00.000Z',
      '2026-11-25T12:02:00.000Z',
    ]);
  });

  it("plans a late check: ticks within the grace all fire; older ones as 'missed' says", () => {
    const base = Date.parse('2026-11-25T12:00:00Z');
    const plan = (missed: ScheduleSpec['missed']) =>
      ticksToFire(checkSchedule('s', { pattern: 'p', everyMs: 5_000, missed }), base, base + 32_000, base);
    // Due at +0 s, checked at +32 s: +0, +5, +10, +15, +20 are over 10 s late; +25 and +30 are on time.
    expect(plan('skip')).toEqual({ fire: [base + 25_000, base + 30_000], missed: 5, next: base + 35_000 });
    expect(plan('once')).toEqual({
      fire: [base + 20_000, base + 25_000, base + 30_000],
      missed: 4,
      next: base + 35_000,
    });
    expect(plan({ max: 2 }).fire).toEqual([base + 15_000, base + 20_000, base + 25_000, base + 30_000]);
  });

  it('fires late, never counts missed, the ticks a working deployment saw while on time (busy processes, not none)', () => {
    const base = Date.parse('2026-11-25T12:00:00Z');
    const spec = checkSchedule('s', { pattern: 'p', everyMs: 5_000 });
    // Takes have gone on since +1 s, the last one at +31 s: every tick up to +31 s was seen on time.
    expect(ticksToFire(spec, base, base + 32_000, base, { start: base + 1_000, last: base + 31_000 })).toEqual({
      fire: [base, base + 5_000, base + 10_000, base + 15_000, base + 20_000, base + 25_000, base + 30_000],
      missed: 0,
      next: base + 35_000,
    });
    // A run of takes that began 25 s after the tick: the tick at +0 was past its grace when first seen.
    expect(ticksToFire(spec, base, base + 32_000, base, { start: base + 25_000, last: base + 31_000 })).toMatchObject({
      fire: [base + 15_000, base + 20_000, base + 25_000, base + 30_000],
      missed: 3,
    });
    // The first take after a stop (no run under way): the older ticks were missed.
    expect(ticksToFire(spec, base, base + 32_000, base, { start: 0, last: 0 }).missed).toBe(5);
  });

  it('stores the same spec as the same JSON whatever order its fields came in (replicas compare it)', () => {
    const a = checkSchedule('s', { pattern: 'p', cron: '0 3 * * *', tz: 'UTC', payload: { a: 1 } });
    const b = checkSchedule('s', { payload: { a: 1 }, tz: 'UTC', cron: '0 3 * * *', pattern: 'p' });
    expect(JSON.stringify(a)).toBe(JSON.stringify(b));
  });
});

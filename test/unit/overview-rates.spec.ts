import { describe, expect, it } from '@jest/globals';
import { ratesOf } from '../../lib/core/admin/overview.js';

describe('ratesOf (the overview chart: tasks per minute from the counters recorded each minute)', () => {
  const minute = (m: number) => m * 60_000;
  // Recorded at the first reaper sweep of minutes 100, 101 and 103 (102 was missed): "<ms> <completed> <failed> <retried> <dead>".
  const history = [
    '100',
    `${minute(100) + 2_000} 10 1 0 0`,
    '103',
    `${minute(103) + 1_000} 70 4 1 3`,
    '101',
    `${minute(101) + 1_500} 30 1 0 1`,
  ];

  it('counts what happened between consecutive records, spreads a gap over its minutes, and counts the minute under way so far', () => {
    expect(ratesOf(history, { at: minute(103) + 30_000, completed: 75, failed: 6, deadLettered: 4 })).toEqual([
      { at: minute(100), completed: 20, failed: 0, deadLettered: 1 },
      // Minute 102 has no record: 101 to 103 counted 40, 3 and 2, spread over the two minutes.
      { at: minute(101), completed: 20, failed: 1.5, deadLettered: 1, spread: true },
      { at: minute(102), completed: 20, failed: 1.5, deadLettered: 1, spread: true },
      { at: minute(103), completed: 5, failed: 2, deadLettered: 1, partial: true },
    ]);
  });

  it('never reports a negative count (counters reset by hand), and skips records it cannot read', () => {
    expect(
      ratesOf(['100', 'garbage', '101', `${minute(101)} 50 5 0 0`], {
        at: minute(101) + 10_000,
        completed: 3,
        failed: 0,
        deadLettered: 0,
      }),
    ).toEqual([{ at: minute(101), completed: 0, failed: 0, deadLettered: 0, partial: true }]);
    expect(ratesOf([], { at: minute(5), completed: 1, failed: 1, deadLettered: 0 })).toEqual([]);
  });
});

import { afterEach, beforeEach, describe, expect, it, jest } from '@jest/globals';
import { OperationsUnderWay } from '../../lib/core/worker/overdue.js';

/** An operation that never settles (a wait on a connection that went silent). */
const never = () => new Promise<never>(() => undefined);

/** The overdue figure as it is (the clock is frozen: track() reads the same time as the test). */
const figure = (overdue: { connection: string; overdueMs: number } | undefined) =>
  overdue && { connection: overdue.connection, overdueMs: overdue.overdueMs };

// A frozen clock: on a busy machine a few milliseconds passed between the test's Date.now() and
// track()'s, and the figures came out 590 instead of 600.
beforeEach(() => {
  jest.useFakeTimers({ now: 1_700_000_000_000, doNotFake: ['nextTick', 'setImmediate', 'queueMicrotask'] });
});
afterEach(() => {
  jest.useRealTimers();
});

describe('OperationsUnderWay: which Redis operation of a claim loop is past its allowance', () => {
  it('measures a wait from its start, or from when its connection became ready again (it was resent then)', () => {
    const underWay = new OperationsUnderWay();
    const started = Date.now();
    void underWay.track('blocking', 1_000, never());
    expect(underWay.overdue(started + 900)).toBeUndefined();
    expect(figure(underWay.overdue(started + 1_600))).toEqual({ connection: 'blocking', overdueMs: 600 });
    // The watchdog reconnected the blocking connection at +1,600; it was ready at +1,700 and the wait
    // was sent again: it gets its whole allowance from there, instead of being cut again at once (a
    // wait longer than the watchdog's timeout was cut on every reconnection, for ever).
    const readyAgain = (connection: string) => (connection === 'blocking' ? started + 1_700 : undefined);
    expect(underWay.overdue(started + 2_600, readyAgain)).toBeUndefined();
    expect(figure(underWay.overdue(started + 3_000, readyAgain))).toEqual({ connection: 'blocking', overdueMs: 300 });
    // A connection that became ready before the operation started changes nothing.
    expect(figure(underWay.overdue(started + 1_600, () => started - 5_000))).toEqual({
      connection: 'blocking',
      overdueMs: 600,
    });
  });

  it('reports the operation furthest past its allowance, of either connection', () => {
    const underWay = new OperationsUnderWay();
    const started = Date.now();
    void underWay.track('blocking', 5_000, never());
    void underWay.track('command', 0, never());
    expect(figure(underWay.overdue(started + 1_000))).toEqual({ connection: 'command', overdueMs: 1_000 });
    expect(
      figure(underWay.overdue(started + 1_000, (connection) => (connection === 'command' ? started + 800 : undefined))),
    ).toEqual({ connection: 'command', overdueMs: 200 });
  });
});

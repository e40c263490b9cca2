import { afterEach, describe, expect, it, jest } from '@jest/globals';
import { firstSendRecord, namedRecord } from '../../lib/core/redis/call-record.js';
import { MARK_RENEWAL_MS, RootCalls, SequencedRecord, callsOf } from '../../lib/core/redis/call-sequence.js';

// An enqueue call numbered on its connection (enqueueTasks-1.lua, modes '4' to '8'): its number, the lowest
// call still unanswered when it was written, and whether it renews the mark's TTL, as each write sends them.
describe('a call numbered on its connection', () => {
  afterEach(() => {
    jest.useRealTimers();
  });

  /** The parts of a numbered record: mode, TTL, session, number and lowest (base 36 read back). */
  const parts = (record: string) => {
    const [ttl, session, n, lowest] = record.slice(2).split('.');
    return { mode: record[1], ttl: Number(ttl), session, n: parseInt(n, 36), lowest: parseInt(lowest, 36) };
  };

  it('is numbered at its first write, renews at first, then goes as a resend of the same number on each write after', () => {
    const connection = {};
    const record = SequencedRecord.of(connection, 'p:{q}', firstSendRecord(Date.now() + 60_000, 5_000))!;
    const first = parts(record.next());
    expect(first).toMatchObject({ mode: '5', ttl: 15, n: 1, lowest: 1 });
    expect(first.session).toMatch(/^~[\w-]{12}[0-9a-z]+$/); // 72 random bits, then the session's number
    const again = parts(record.next());
    expect(again).toEqual({ ...first, mode: '7' });
  });

  it('gives the lowest unanswered call of its root, its own number once every lower one was answered', () => {
    const connection = {};
    const open = () => SequencedRecord.of(connection, 'p:{q}', firstSendRecord(Date.now() + 60_000, 5_000))!;
    const [a, b, c] = [open(), open(), open()];
    expect(parts(a.next())).toMatchObject({ n: 1, lowest: 1 });
    expect(parts(b.next())).toMatchObject({ n: 2, lowest: 1, mode: '5' }); // no renewal answered yet
    b.settle(true);
    expect(parts(c.next())).toMatchObject({ n: 3, lowest: 1 }); // 1 still unanswered
    a.settle(true);
    c.settle(true);
    const d = open();
    expect(parts(d.next())).toMatchObject({ n: 4, lowest: 4, mode: '4' }); // renewed by a call answered
    // Another root of the same connection: numbered on its own.
    const other = SequencedRecord.of(connection, 'p:{r}', firstSendRecord(Date.now() + 60_000, 5_000))!;
    expect(parts(other.next())).toMatchObject({ n: 1, lowest: 1 });
  });

  it('renews again once a second passed since the last renewal answered, and not on one that failed', () => {
    const calls = new RootCalls();
    const opened = calls.open(1_000);
    expect(opened.renews).toBe(true);
    calls.settle(opened.n, undefined); // it failed: not renewed
    const retry = calls.open(1_001);
    expect(retry.renews).toBe(true);
    calls.settle(retry.n, 1_001);
    expect(calls.open(1_001 + MARK_RENEWAL_MS - 1).renews).toBe(false);
    expect(calls.open(1_001 + MARK_RENEWAL_MS).renews).toBe(true);
  });

  it("goes as '3' when first written after its deadline (taking no number), and as '8' when written again after it", () => {
    const connection = {};
    const late = SequencedRecord.of(connection, 'p:{q}', firstSendRecord(Date.now() - 1, 5_000))!;
    expect(late.next()[1]).toBe('3');
    late.settle(false);
    jest.useFakeTimers({ now: Date.now() });
    const timely = SequencedRecord.of(connection, 'p:{q}', firstSendRecord(Date.now() + 50, 5_000))!;
    expect(parts(timely.next())).toMatchObject({ mode: '5', n: 1 });
    jest.setSystemTime(Date.now() + 50);
    expect(parts(timely.next())).toMatchObject({ mode: '8', n: 1 });
  });

  it('leaves a named record and a record without a deadline to the per-call record', () => {
    expect(SequencedRecord.of({}, 'p:{q}', namedRecord('sch.pulse.1', 30))).toBeUndefined();
    expect(SequencedRecord.of({}, 'p:{q}', '{160.call-1')).toBeUndefined();
  });

  it('keeps calls of different record TTLs apart (each its own session and mark)', () => {
    const connection = {};
    expect(callsOf(connection, 'p:{q}', 15).session).not.toBe(callsOf(connection, 'p:{q}', 20).session);
    expect(callsOf(connection, 'p:{q}', 15)).toBe(callsOf(connection, 'p:{q}', 15));
  });
});

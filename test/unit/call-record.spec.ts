import { describe, expect, it } from '@jest/globals';
import { firstSendRecord, namedRecord, writtenRecord } from '../../lib/core/redis/call-record.js';

// How an enqueue call's record goes on each write (see enqueueTasks-1.lua's modes): ioredis writes a command
// again after a reconnection lost its reply, and writes one first from its offline queue once Redis is back.
describe('a call record as it is written', () => {
  const mode = (record: string) => record[1];

  it("goes as a first send ('1') the first time and as a resend ('2') after, while its deadline has not passed", () => {
    const record = firstSendRecord(Date.now() + 60_000, 5_000);
    expect(mode(record)).toBe('1');
    expect(writtenRecord(record, 1)).toBe(record);
    expect(mode(writtenRecord(record, 2))).toBe('2');
    expect(writtenRecord(record, 2).slice(2)).toBe(record.slice(2)); // the same call id and TTL
  });

  it("goes as '3' (write nothing new) on any write after its deadline, the first one included", () => {
    const record = firstSendRecord(Date.now() - 1, 5_000);
    expect(mode(writtenRecord(record, 1))).toBe('3');
    expect(mode(writtenRecord(record, 2))).toBe('3');
    expect(writtenRecord(record, 1).slice(2)).toBe(record.slice(2));
  });

  it("leaves a named record (a schedule's tick, mode '2' from the first send) as it is, whatever its id holds", () => {
    // A schedule id that reads as a small base-36 number was once taken for a deadline long past.
    const record = namedRecord('sch.pulse.1795877868573', 30);
    expect(writtenRecord(record, 1)).toBe(record);
    expect(writtenRecord(record, 3)).toBe(record);
  });

  it('only marks a record made without a deadline as sent again', () => {
    const record = '{160.call-1';
    expect(writtenRecord(record, 1)).toBe(record);
    expect(writtenRecord(record, 2)).toBe('{260.call-1');
  });
});

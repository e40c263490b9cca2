import { describe, expect, it } from '@jest/globals';
import { parseTaskIndex } from '../../lib/core/model/task-status.js';

const about = { id: 't1', pattern: 'jobs' };

describe('parseTaskIndex', () => {
  it('tells when the index last changed: its creation (enq), its run start (started), or any later move (at)', () => {
    expect(parseTaskIndex({ state: 'pending', enq: '100', client: 'c' }, about)).toMatchObject({
      enqueuedAt: 100,
      changedAt: 100,
    });
    // Running: written without an `at` of its own; an earlier move's `at` (a retry's) is older than its start.
    expect(parseTaskIndex({ state: 'running', enq: '100', at: '150', started: '200' }, about)).toMatchObject({
      changedAt: 200,
      startedAt: 200,
    });
    expect(parseTaskIndex({ state: 'completed', enq: '100', started: '200', at: '300' }, about)).toMatchObject({
      changedAt: 300,
    });
    // An index written by an earlier release (an `at` at its creation) reads the same.
    expect(parseTaskIndex({ state: 'pending', enq: '100', at: '100', priority: '0' }, about)).toMatchObject({
      changedAt: 100,
    });
    expect(parseTaskIndex({ state: 'pending' }, about)).not.toHaveProperty('changedAt');
  });
});

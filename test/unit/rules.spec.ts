import { describe, expect, it } from '@jest/globals';
import { InvalidTaskError } from '../../lib/core/model/errors.js';
import { prepareTask, taskIdNonce } from '../../lib/core/producer/task-items.js';
import { RedisTaskRecordBuilder } from '../../lib/nest/redis-task-record.builder.js';
import {
  clientConcurrencyProblem,
  groupProblem,
  MAX_CLIENT_CONCURRENCY,
  MAX_GROUP_LENGTH,
  MAX_NAME_LENGTH,
  MAX_RATE,
  MAX_WEIGHT,
  nameProblem,
  patternProblem,
  rateProblem,
  validateClientId,
  validateGroup,
  validateRetry,
  weightProblem,
} from '../../lib/core/config/rules.js';
import { InvalidOptionError } from '../../lib/core/model/errors.js';

describe('rules: every bound and name rule in one place', () => {
  it('names (client ids, prefixes, worker ids): non-empty, bounded, no braces, spaces or control characters', () => {
    expect(nameProblem('tenant-1:eu')).toBeUndefined();
    expect(nameProblem('x'.repeat(MAX_NAME_LENGTH))).toBeUndefined();
    for (const bad of ['', 'x'.repeat(MAX_NAME_LENGTH + 1), 'a{b}', 'a b', 'tab\there', 'nul\u0000', 42, undefined]) {
      expect(nameProblem(bad)).toEqual(expect.any(String));
    }
  });

  it('patterns: any routable string within a length, no control characters', () => {
    expect(patternProblem('orders.created {v2}')).toBeUndefined();
    expect(patternProblem('')).toEqual(expect.any(String));
    expect(patternProblem('a\nb')).toEqual(expect.any(String));
  });

  it('groups: no key separator, braces or spaces, at most MAX_GROUP_LENGTH characters', () => {
    expect(groupProblem('billing')).toBeUndefined();
    for (const bad of ['', 'a:b', 'a{b', 'a b', 'x'.repeat(MAX_GROUP_LENGTH + 1)])
      expect(groupProblem(bad)).toEqual(expect.any(String));
  });

  it('numbers: rates above 0, weights 1 to MAX_WEIGHT, per-client caps 0 to MAX_CLIENT_CONCURRENCY', () => {
    expect([0.5, MAX_RATE].map(rateProblem)).toEqual([undefined, undefined]);
    expect([0, -1, MAX_RATE + 1, Number.NaN, '5'].map(rateProblem).every(Boolean)).toBe(true);
    expect([1, MAX_WEIGHT].map(weightProblem)).toEqual([undefined, undefined]);
    expect([0, 1.5, MAX_WEIGHT + 1].map(weightProblem).every(Boolean)).toBe(true);
    expect([0, MAX_CLIENT_CONCURRENCY].map(clientConcurrencyProblem)).toEqual([undefined, undefined]);
    expect([-1, 0.5, MAX_CLIENT_CONCURRENCY + 1].map(clientConcurrencyProblem).every(Boolean)).toBe(true);
  });

  it('validators throw InvalidOptionError naming the option and a short description of the value', () => {
    expect(() => validateGroup('group', 'a:b')).toThrow(InvalidOptionError);
    expect(() => validateGroup('group', 'a:b')).toThrow(
      'option "group" must not contain the key separator ":", braces, spaces or control characters, got "a:b"',
    );
    // An operator's client id follows the producer's rule, and is never the every-client entry "*".
    expect(() => validateClientId('clientId', 'has space')).toThrow('option "clientId"');
    expect(() => validateClientId('clientId', '*')).toThrow('must be a client id, not "*"');
    expect(() => validateRetry('retry', { backoff: { type: 'fixed', delayMs: -1 } })).toThrow(
      'option "retry.backoff.delayMs"',
    );
  });
});

describe('task rules: the record builder and the producer gate apply the same ones', () => {
  const limits = { maxPayloadBytes: 1_000, deduplicationTtlMs: 1_000 };
  const accepts = (f: () => unknown): boolean => {
    try {
      f();
      return true;
    } catch (error) {
      if (!(error instanceof InvalidTaskError)) throw error;
      return false;
    }
  };
  // (null and undefined are "not given" to the gate, refused by a setter: not compared.)
  const odd = [-1, 0, 1, 1.5, 1_000_000, 1_000_001, Number.NaN, Infinity, '3', 2 ** 60];

  it('agree on priorities, delays and deduplication keys and TTLs', () => {
    for (const value of odd) {
      const item = { payload: 1, clientId: 'c' };
      expect([value, accepts(() => new RedisTaskRecordBuilder(1).setPriority(value as number))]).toEqual([
        value,
        accepts(() => prepareTask({ ...item, priority: value as number }, Date.now(), undefined, limits)),
      ]);
      expect([value, accepts(() => new RedisTaskRecordBuilder(1).setDelay(value as number))]).toEqual([
        value,
        accepts(() => prepareTask({ ...item, delayMs: value as number }, Date.now(), undefined, limits)),
      ]);
      expect([
        value,
        accepts(() => new RedisTaskRecordBuilder(1).setDeduplicationKey('k', { ttlMs: value as number })),
      ]).toEqual([
        value,
        accepts(() =>
          prepareTask(
            { ...item, deduplicationKey: 'k', deduplicationTtlMs: value as number },
            Date.now(),
            undefined,
            limits,
          ),
        ),
      ]);
    }
    for (const key of ['', 'k', 'x'.repeat(512), 'x'.repeat(513), 7]) {
      expect(accepts(() => new RedisTaskRecordBuilder(1).setDeduplicationKey(key as string))).toBe(
        accepts(() =>
          prepareTask({ payload: 1, clientId: 'c', deduplicationKey: key as string }, Date.now(), undefined, limits),
        ),
      );
    }
  });
});

describe('task ids', () => {
  it('never start with "-" or "_", which the CLI would read as an option, whatever the random bytes', () => {
    // 0xf8 and 0xfc encode to '-' and '_' as the first base64url character.
    for (const first of [0xf8, 0xfc, 0x00]) {
      const nonce = taskIdNonce(Uint8Array.from([first, 1, 2, 3, 4, 5, 6, 7, 8]));
      expect(nonce).toMatch(/^[A-Za-z0-9][A-Za-z0-9_-]{11}$/);
    }
    expect(taskIdNonce(Uint8Array.from([0x00, 1, 2, 3, 4, 5, 6, 7, 8]))).toBe(
      Buffer.from([0x00, 1, 2, 3, 4, 5, 6, 7, 8]).toString('base64url'),
    );
  });
});

import { describe, expect, it } from '@jest/globals';
import { backoffDelay, DEFAULT_RETRY_POLICY, mergeRetry } from '../../lib/core/model/retry-policy.js';

describe('backoff', () => {
  const exponential = { type: 'exponential' as const, delayMs: 100, maxDelayMs: 1_000, jitter: 0 };

  it('doubles an exponential delay per attempt up to its cap', () => {
    expect([1, 2, 3, 4, 5, 6].map((attempt) => backoffDelay(exponential, attempt))).toEqual([100, 200, 400, 800, 1_000, 1_000]);
  });

  it('keeps a fixed delay', () => {
    expect(backoffDelay({ ...exponential, type: 'fixed' }, 9)).toBe(100);
  });

  it('randomises away at most the jitter fraction', () => {
    const jittered = { ...exponential, jitter: 0.5 };
    expect(backoffDelay(jittered, 1, () => 0)).toBe(100);
    expect(backoffDelay(jittered, 1, () => 0.999)).toBe(50);
  });

  it('layers transport < pattern < record', () => {
    const policy = mergeRetry(DEFAULT_RETRY_POLICY, { maxAttempts: 5 }, { backoff: { type: 'fixed', delayMs: 7 } }, undefined);
    // Fixed means fixed: no jitter unless asked for; exponential keeps its default spread.
    expect(policy).toEqual({ maxAttempts: 5, backoff: { type: 'fixed', delayMs: 7, maxDelayMs: 3_600_000, jitter: 0 } });
    expect(mergeRetry(DEFAULT_RETRY_POLICY, { backoff: { type: 'exponential', delayMs: 7 } }).backoff.jitter).toBe(0.5);
    expect(mergeRetry(DEFAULT_RETRY_POLICY, { backoff: { type: 'fixed', delayMs: 7, jitter: 0.2 } }).backoff.jitter).toBe(0.2);
  });
});

import { describe, expect, it } from '@jest/globals';
import { admit, backoffDelay, decide, DEFAULT_RETRY_POLICY, mergeRetry } from '../../lib/core/model/retry-policy.js';

describe('backoff', () => {
  const exponential = { type: 'exponential' as const, delayMs: 100, maxDelayMs: 1_000, jitter: 0 };

  it('doubles an exponential delay per attempt up to its cap', () => {
    expect([1, 2, 3, 4, 5, 6].map((attempt) => backoffDelay(exponential, attempt))).toEqual([
      100, 200, 400, 800, 1_000, 1_000,
    ]);
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
    const policy = mergeRetry(
      DEFAULT_RETRY_POLICY,
      { maxAttempts: 5 },
      { backoff: { type: 'fixed', delayMs: 7 } },
      undefined,
    );
    // Fixed means fixed: no jitter unless asked for; exponential keeps its default spread.
    expect(policy).toEqual({
      maxAttempts: 5,
      backoff: { type: 'fixed', delayMs: 7, maxDelayMs: 3_600_000, jitter: 0 },
    });
    expect(mergeRetry(DEFAULT_RETRY_POLICY, { backoff: { type: 'exponential', delayMs: 7 } }).backoff.jitter).toBe(0.5);
    expect(
      mergeRetry(DEFAULT_RETRY_POLICY, { backoff: { type: 'fixed', delayMs: 7, jitter: 0.2 } }).backoff.jitter,
    ).toBe(0.2);
  });
});

describe('admit(): may a claimed task run?', () => {
  it('runs attempt n+1 while attempts remain and the task has not expired', () => {
    expect(admit({ attempts: 0, maxAttempts: 3, now: 1_000 })).toEqual({ kind: 'run', attempt: 1 });
    expect(admit({ attempts: 2, maxAttempts: 3, expiresAt: 1_001, now: 1_000 })).toEqual({ kind: 'run', attempt: 3 });
  });

  it('dead-letters as interrupted when earlier runs used up the attempts without finishing', () => {
    expect(admit({ attempts: 3, maxAttempts: 3, now: 1_000 })).toMatchObject({
      kind: 'dead-letter',
      reason: 'interrupted',
      detail: expect.stringContaining('maxAttempts is 3'),
    });
  });

  it('dead-letters as expired once the expiry time has passed (interrupted wins when both hold)', () => {
    expect(admit({ attempts: 0, maxAttempts: 3, expiresAt: 1_000, now: 1_000 })).toMatchObject({
      kind: 'dead-letter',
      reason: 'expired',
    });
    expect(admit({ attempts: 3, maxAttempts: 3, expiresAt: 1, now: 1_000 })).toMatchObject({ reason: 'interrupted' });
  });
});

describe('decide(): after a failed run', () => {
  const policy = {
    maxAttempts: 3,
    backoff: { type: 'exponential' as const, delayMs: 100, maxDelayMs: 1_000, jitter: 0 },
  };

  it('retries with the backoff of the attempt that failed while attempts remain', () => {
    expect(decide({ attempt: 1, nonRetryable: false, timedOut: false }, policy)).toEqual({
      kind: 'retry',
      delayMs: 100,
    });
    expect(decide({ attempt: 2, nonRetryable: false, timedOut: true }, policy)).toEqual({
      kind: 'retry',
      delayMs: 200,
    });
  });

  it('dead-letters on the last attempt, as timeout when that run timed out', () => {
    expect(decide({ attempt: 3, nonRetryable: false, timedOut: false }, policy)).toEqual({
      kind: 'dead-letter',
      reason: 'failed',
      detail: 'failed all 3 attempt(s)',
    });
    expect(decide({ attempt: 3, nonRetryable: false, timedOut: true }, policy)).toMatchObject({
      kind: 'dead-letter',
      reason: 'timeout',
    });
  });

  it('dead-letters a non-retryable error at once', () => {
    expect(decide({ attempt: 1, nonRetryable: true, timedOut: false }, policy)).toEqual({
      kind: 'dead-letter',
      reason: 'failed',
      detail: 'non-retryable error',
    });
  });

  it('draws the jitter from the given source', () => {
    const jittered = { ...policy, backoff: { ...policy.backoff, jitter: 0.5 } };
    expect(decide({ attempt: 1, nonRetryable: false, timedOut: false }, jittered, () => 0.999)).toEqual({
      kind: 'retry',
      delayMs: 50,
    });
  });

  it('takes the delay a handler asked for, while attempts remain; on the last attempt dead-letters as failed, saying so', () => {
    const requested = { kind: 'retry' as const, delayMs: 7 };
    expect(decide({ attempt: 1, nonRetryable: false, timedOut: false, requested }, policy)).toEqual({
      kind: 'retry',
      delayMs: 7,
    });
    expect(
      decide({ attempt: 1, nonRetryable: false, timedOut: false, requested: { kind: 'retry' } }, policy, () => 0),
    ).toEqual({ kind: 'retry', delayMs: 100 });
    expect(decide({ attempt: 3, nonRetryable: false, timedOut: false, requested }, policy)).toMatchObject({
      kind: 'dead-letter',
      reason: 'failed',
      detail: 'the handler asked for a retry on the last of 3 attempt(s)',
    });
  });

  it("dead-letters as rejected, with the handler's reason, when the handler asked for it (even with attempts left)", () => {
    expect(
      decide(
        {
          attempt: 1,
          nonRetryable: false,
          timedOut: false,
          requested: { kind: 'dead-letter', detail: 'no such user' },
        },
        policy,
      ),
    ).toEqual({
      kind: 'dead-letter',
      reason: 'rejected',
      detail: 'no such user',
    });
  });
});

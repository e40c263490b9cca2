import { describe, expect, it } from '@jest/globals';
import { redis, gateway, keys, worker, enqueue, claim, useLuaHarness } from '../harness.js';

useLuaHarness();

describe('deadLetterTask', () => {
  it('moves the task to dead letters, newest first, capped', async () => {
    await enqueue(['a', ['1', '2', '3']]);
    const reply = (await claim('a', 3)) as string[];
    for (let i = 0; i < reply.length; i += 2) {
      const record = JSON.stringify({ id: String(i / 2 + 1), reason: 'failed' });
      expect(await gateway.deadLetter(keys, worker, reply[i], { record: record, cap: 2 })).toBe(true);
    }
    const dead = (await redis.lrange(keys.deadLetters, 0, -1)).map((raw) => JSON.parse(raw).id);
    expect(dead).toEqual(['3', '2']);
    expect(await gateway.deadLetter(keys, worker, reply[0], { record: '{}', cap: 2 })).toBe(false);
    expect(await redis.hgetall(keys.counters)).toEqual({ deadLettered: '3', failed: '3' });
  });

  it('counts a dead letter as failed only when its reason is "failed", whatever its payload says', async () => {
    await enqueue(['a', ['1']]);
    const [token] = (await claim('a', 1)) as string[];
    const record = JSON.stringify({ id: '1', reason: 'expired', payload: { reason: 'failed' } });
    expect(await gateway.deadLetter(keys, worker, token, { record: record, cap: 5 })).toBe(true);
    expect(await redis.hgetall(keys.counters)).toEqual({ deadLettered: '1' });
    // A reason the script does not know of (a newer one) is not a handler failure either.
    await enqueue(['a', ['2']]);
    const [second] = (await claim('a', 1)) as string[];
    expect(
      await gateway.deadLetter(keys, worker, second, {
        record: JSON.stringify({ id: '2', reason: 'unsupported-version' }),
        cap: 5,
      }),
    ).toBe(true);
    expect(await redis.hgetall(keys.counters)).toEqual({ deadLettered: '2' });
  });
});

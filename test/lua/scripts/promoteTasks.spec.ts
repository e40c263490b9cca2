import { describe, expect, it } from '@jest/globals';
import { redis, gateway, keys, entry, useLuaHarness } from '../harness.js';

useLuaHarness();

describe('promoteTasks', () => {
  it('moves entries still delayed to the tail of their lists once, adding clients to the ring', async () => {
    const e1 = entry('1', 'a', 1);
    await redis.zadd(keys.delayed, 1, e1);
    const promote = () => gateway.promote(keys, [{ entry: e1, clientId: 'a', priority: 0 }]);
    const [first, second] = await Promise.all([promote(), promote()]);
    expect(first + second).toBe(1);
    expect(await redis.lrange(keys.pending('a'), 0, -1)).toEqual([e1]);
    expect(await redis.lrange(keys.ring, 0, -1)).toEqual(['a']);
    expect(await redis.zcard(keys.delayed)).toBe(0);
  });
});

describe('deadLetterDelayed', () => {
  it('moves an entry still delayed to dead letters once, counted, even when two reapers race', async () => {
    const garbage = 'not a task';
    await redis.zadd(keys.delayed, 1, garbage);
    const move = () =>
      gateway.deadLetterDelayed(keys, garbage, JSON.stringify({ reason: 'malformed', raw: garbage }), 5);
    const moved = await Promise.all([move(), move()]);
    expect(moved.filter(Boolean)).toHaveLength(1);
    expect(await redis.lrange(keys.deadLetters, 0, -1)).toEqual([
      JSON.stringify({ reason: 'malformed', raw: garbage }),
    ]);
    expect(await redis.zcard(keys.delayed)).toBe(0);
    expect(await redis.hgetall(keys.counters)).toEqual({ deadLettered: '1' });
  });

  it('changes nothing when the dead-letter key holds another type', async () => {
    await redis.zadd(keys.delayed, 1, 'junk');
    await redis.set(keys.deadLetters, 'a string');
    await expect(gateway.deadLetterDelayed(keys, 'junk', '{}', 5)).rejects.toThrow();
    expect(await redis.zcard(keys.delayed)).toBe(1);
  });
});

import { describe, expect, it } from '@jest/globals';
import { redis, gateway, keys, entry, useLuaHarness } from '../harness.js';

useLuaHarness();

describe('requeueDeadLetters', () => {
  it('moves a dead letter back to its list once, even when requeued twice at the same time', async () => {
    const record = JSON.stringify({ id: '9', clientId: 'a', payload: 1, reason: 'failed' });
    await redis.lpush(keys.deadLetters, record);
    const fresh = entry('9', 'a');
    const requeue = () => gateway.requeueDeadLetters(keys, [{ raw: record, clientId: 'a', entry: fresh, priority: 0 }]);
    const [first, second] = await Promise.all([requeue(), requeue()]);
    expect(first + second).toBe(1);
    expect(await redis.lrange(keys.pending('a'), 0, -1)).toEqual([fresh]);
    expect(await redis.llen(keys.deadLetters)).toBe(0);
    expect(await redis.lrange(keys.ring, 0, -1)).toEqual(['a']);
  });
});

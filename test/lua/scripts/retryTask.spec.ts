import { describe, expect, it } from '@jest/globals';
import { decodeEntry } from '../../../lib/core/model/codec.js';
import { redis, gateway, keys, worker, enqueue, claim, useLuaHarness } from '../harness.js';

useLuaHarness();

describe('retryTask', () => {
  it('moves the task to the delayed set, due after the delay, attempt counted; fenced', async () => {
    await enqueue(['a', ['1']]);
    const [token] = (await claim('a', 1)) as string[];
    const [seconds] = await redis.time();
    const retried = await gateway.retry(keys, worker, token, 2_000);
    const due = retried.kind === 'scheduled' ? retried.dueAt : 0;
    expect(due - Number(seconds) * 1000).toBeGreaterThanOrEqual(1_000);
    const [entry, score] = await redis.zrange(keys.delayed, '0', '-1', 'WITHSCORES');
    expect(Number(score)).toBe(due);
    expect(decodeEntry(entry)).toMatchObject({ ok: true, entry: { attempts: 1 } });
    expect(await gateway.retry(keys, worker, token, 2_000)).toEqual({ kind: 'lost' });
    // Counted once: the refused second call changed nothing.
    expect(await redis.hgetall(keys.counters)).toEqual({ failed: '1', retried: '1' });
  });
});

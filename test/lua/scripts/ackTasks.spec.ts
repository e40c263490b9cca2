import { describe, expect, it } from '@jest/globals';
import {
  redis,
  gateway,
  prefix,
  keys,
  worker,
  enqueueWith,
  enqueue,
  claim,
  ack,
  pairsOf,
  useLuaHarness,
} from '../harness.js';

useLuaHarness();

describe('ackTasks', () => {
  it('acknowledges a held token once, and refuses it afterwards (fencing)', async () => {
    await enqueue(['a', ['1']]);
    const [token] = (await claim('a', 1)) as string[];
    expect(await ack(token, '1')).toBe(true);
    expect(await ack(token, '1')).toBe(false);
    expect(await redis.exists(keys.processing(worker))).toBe(0);
  });

  it('checks the per-client cap keys only where a cap is in use: without one, a broken cap key does not stop an acknowledgement', async () => {
    await enqueue(['a', ['1', '2']]);
    const [first, , second] = (await claim('a', 2)) as string[];
    await redis.set(keys.inflight, 'x'); // a cap key of the wrong type, while no task was claimed under a cap
    expect(await ack(first, '1')).toBe(true);
    await redis.hset(keys.counted, 'some-token', 'a'); // now a cap is in use: its keys are checked first
    await expect(ack(second, '2')).rejects.toThrow(/WRONGTYPE.*inflight/);
    expect(await redis.hexists(keys.processing(worker), second)).toBe(1);
  });

  it('settles several tasks in one call, each fenced on its own token', async () => {
    await enqueueWith([
      ['a', '1'],
      ['a', '2', { dedupKey: 'k' }],
      ['a', '3'],
    ]);
    const tokens = ((await claim('a', 3)) as string[]).filter((_, i) => i % 2 === 0);
    const reply = JSON.stringify({ id: '3', response: 7 });
    const results = await gateway.acknowledge(keys, worker, [
      { token: tokens[0], taskId: '1', resultTtlMs: 5_000 },
      { token: 'not-a-held-token', taskId: 'x', resultTtlMs: 5_000 },
      { token: tokens[1], taskId: '2', deduplicationKey: 'k', resultTtlMs: 5_000 },
      { token: tokens[2], taskId: '3', reply: { channel: `${prefix}:replies:x`, message: reply }, resultTtlMs: 5_000 },
    ]);
    expect(results).toEqual([true, false, true, true]);
    expect(await redis.hlen(keys.processing(worker))).toBe(0);
    expect(await redis.exists(keys.dedup('k'))).toBe(0);
    expect(await redis.get(keys.result('3'))).toBe(reply);
    expect(await redis.exists(keys.result('1'), keys.result('2'))).toBe(0);
    expect(await redis.hget(keys.counters, 'completed')).toBe('3');
  });

  it('acknowledges a token given twice in one call once', async () => {
    await enqueue(['a', ['1']]);
    const [token] = (await claim('a', 1)) as string[];
    const results = await gateway.acknowledge(keys, worker, [
      { token, taskId: '1', resultTtlMs: 5_000 },
      { token, taskId: '1', resultTtlMs: 5_000 },
    ]);
    expect(results).toEqual([true, false]);
    expect(await redis.hget(keys.counters, 'completed')).toBe('1');
  });

  it('settles more tasks in one call than Lua can unpack at once (a worker of concurrency 10,000)', async () => {
    const count = 9_000;
    const clientIds = Array.from({ length: count }, (_, i) => String(i));
    await enqueueWith(clientIds.map((id) => ['a', id] as [string, string]));
    const tokens: string[] = [];
    while (tokens.length < count) tokens.push(...pairsOf(await claim('a', 1_000)).filter((_, i) => i % 2 === 0)); // prefetch is at most 1,000
    expect(tokens).toHaveLength(count);
    const results = await gateway.acknowledge(
      keys,
      worker,
      tokens.map((token, i) => ({ token, taskId: String(i), resultTtlMs: 5_000 })),
    );
    expect(results.filter((held) => held)).toHaveLength(count);
    expect(await redis.exists(keys.processing(worker))).toBe(0);
    expect(await redis.hget(keys.counters, 'completed')).toBe(String(count));
  });

  it('changes nothing when the processing hash is not a hash', async () => {
    await enqueueWith([['a', '1', { dedupKey: 'k' }]]);
    const [token] = (await claim('a', 1)) as string[];
    await redis.del(keys.processing(worker));
    await redis.set(keys.processing(worker), 'x');
    await expect(
      gateway.acknowledge(keys, worker, [
        {
          token,
          taskId: '1',
          deduplicationKey: 'k',
          reply: { channel: `${prefix}:replies:x`, message: '{}' },
          resultTtlMs: 5_000,
        },
      ]),
    ).rejects.toThrow(/WRONGTYPE/);
    expect(await redis.exists(keys.result('1'), keys.counters)).toBe(0);
    expect(await redis.get(keys.dedup('k'))).toBe('1');
  });

  it('stores the reply with a TTL for a send() task', async () => {
    await enqueue(['a', ['1']]);
    const [token] = (await claim('a', 1)) as string[];
    const reply = JSON.stringify({ id: '1', response: 42 });
    expect(await ack(token, '1', { channel: `${prefix}:replies:x`, reply })).toBe(true);
    expect(await redis.get(keys.result('1'))).toBe(reply);
    const ttl = await redis.pttl(keys.result('1'));
    expect(ttl).toBeGreaterThan(0);
    expect(ttl).toBeLessThanOrEqual(5_000);
  });
});

import { describe, expect, it } from '@jest/globals';
import { redis, gateway, keys, worker, enqueue, claim, useLuaHarness } from '../harness.js';

useLuaHarness();

describe('heartbeatWorker', () => {
  it('records the lease expiry on the Redis clock', async () => {
    const [seconds] = await redis.time();
    const { now } = await gateway.heartbeat(keys, 'w2', 5_000);
    expect(Math.abs(now - Number(seconds) * 1000)).toBeLessThan(2_000);
    expect(Number(await redis.zscore(keys.workers, 'w2'))).toBe(now + 5_000);
  });

  it('writes an idle lease only over an empty processing hash, the held lease over a task', async () => {
    const idle = await gateway.heartbeat(keys, 'w3', { idle: 400_000, held: 5_000 });
    expect(Number(await redis.zscore(keys.workers, 'w3'))).toBe(idle.now + 400_000);
    // A claim took a task since the caller found the shard idle: the beat writes the held lease after all.
    await redis.hset(keys.processing('w3'), 'tok', 'x');
    const held = await gateway.heartbeat(keys, 'w3', { idle: 400_000, held: 5_000 });
    expect(Number(await redis.zscore(keys.workers, 'w3'))).toBe(held.now + 5_000);
    expect(held.orphaned).toEqual(['tok']);
  });

  it('reports running tokens the hash lost, and held tokens nobody runs', async () => {
    await enqueue(['a', ['1', '2', '3']]);
    const reply = (await claim('a', 3)) as string[];
    const [t1, , t2, , t3] = reply;
    await redis.hdel(keys.processing(worker), t1); // recovered by a reaper meanwhile
    const { lost, orphaned } = await gateway.heartbeat(keys, worker, 5_000, [t1, t2]);
    expect(lost).toEqual([t1]);
    expect(orphaned).toEqual([t3]);
  });
});

describe('forgetWorker', () => {
  it('removes an expired worker with an empty hash, but not one that renewed its lease or holds tasks', async () => {
    await redis.zadd(keys.workers, 100, 'dead', 100, 'busy', 10_000, 'renewed');
    await redis.hset(keys.processing('busy'), '1', 'x');
    expect(await gateway.forgetWorker(keys, 'dead', 500)).toBe(true);
    expect(await gateway.forgetWorker(keys, 'busy', 500)).toBe(false);
    expect(await gateway.forgetWorker(keys, 'renewed', 500)).toBe(false);
    expect(await redis.zrange(keys.workers, '0', '-1')).toEqual(['busy', 'renewed', worker]);
  });
});

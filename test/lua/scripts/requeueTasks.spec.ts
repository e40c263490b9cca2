import { describe, expect, it } from '@jest/globals';
import { decodeEntry } from '../../../lib/core/model/codec.js';
import { redis, gateway, keys, worker, enqueueWith, enqueue, claim, useLuaHarness } from '../harness.js';

useLuaHarness();

describe('requeueTasks', () => {
  async function requeue(countAttempt: 0 | 1, tokens: string[], clientId = 'a', priority = 0): Promise<number> {
    return gateway.requeue(
      keys,
      worker,
      countAttempt === 1,
      tokens.map((token) => ({ token, clientId, priority })),
    );
  }

  it('returns tasks to the head of their lists in claim order and puts the client back on the ring', async () => {
    await enqueue(['a', ['1', '2', '3']]);
    const reply = (await claim('a', 2)) as string[];
    const [t1, , t2] = reply;
    expect(await requeue(0, [t2, t1])).toBe(2);
    const pending = (await redis.lrange(keys.pending('a'), 0, -1)).map((raw) => decodeEntry(raw));
    expect(pending.map((d) => (d.ok ? d.entry.envelope.id : '?'))).toEqual(['1', '2', '3']);
    expect(pending.map((d) => (d.ok ? d.entry.attempts : -1))).toEqual([0, 0, 0]);
    expect(await redis.lrange(keys.ring, 0, -1)).toEqual(['a']);
  });

  it('counts an attempt when asked and adds an emptied client back to the ring', async () => {
    await enqueue(['a', ['1']]);
    const [token] = (await claim('a', 1)) as string[];
    expect(await redis.llen(keys.ring)).toBe(0);
    expect(await requeue(1, [token])).toBe(1);
    const [raw] = await redis.lrange(keys.pending('a'), 0, -1);
    expect(decodeEntry(raw)).toMatchObject({ ok: true, entry: { attempts: 1 } });
    expect(await redis.lrange(keys.ring, 0, -1)).toEqual(['a']);
  });

  it('skips tokens no longer held, so two recoveries never requeue a task twice', async () => {
    await enqueue(['a', ['1']]);
    const [token] = (await claim('a', 1)) as string[];
    const [first, second] = await Promise.all([requeue(1, [token]), requeue(1, [token])]);
    expect(first + second).toBe(1);
    expect(await redis.llen(keys.pending('a'))).toBe(1);
  });

  it('moves nothing for a recovery fenced on a lease the worker renewed since (-1), and moves all once it expired by then', async () => {
    await enqueue(['a', ['1', '2']]);
    const [t1, , t2] = (await claim('a', 2)) as string[];
    const { now } = await gateway.heartbeat(keys, worker, 5_000);
    const held = [t2, t1].map((token) => ({ token, clientId: 'a', priority: 0 }));
    // The reaper saw the lease expired at `now`; the worker renewed it to now + 5,000 meanwhile.
    expect(await gateway.requeue(keys, worker, true, held, now)).toBe(-1);
    expect(await redis.hlen(keys.processing(worker))).toBe(2);
    expect(await redis.llen(keys.pending('a'))).toBe(0);
    expect(await gateway.requeue(keys, worker, true, held, now + 5_000)).toBe(2);
    expect(await redis.llen(keys.pending('a'))).toBe(2);
  });
});

describe('rejoinClient', () => {
  it('puts a client whose tasks nothing can reach back on the ring, counts them, records it, and leaves a client in reach alone', async () => {
    await enqueueWith([
      ['a', '1'],
      ['a', '2', { priority: 2 }],
      ['b', '3'],
    ]);
    await redis.lrem(keys.ring, 0, 'a'); // a hand edit: a's tasks are stranded
    await redis.set(keys.pendingCount, 1);
    expect(await gateway.rejoinClient(keys, 'b')).toBe(0);
    expect(await gateway.rejoinClient(keys, 'a')).toBe(2);
    expect(await gateway.rejoinClient(keys, 'a')).toBe(0);
    expect(await redis.lrange(keys.ring, 0, -1)).toEqual(['b', 'a']);
    expect(await redis.get(keys.pendingCount)).toBe('3');
    expect(await redis.hget(keys.faults, keys.pending('a'))).toMatch(
      /had 2 pending task\(s\) but its client was off the ring; put back/,
    );
    await redis.sadd(keys.parked, 'c');
    await enqueueWith([['c', '4']]);
    await redis.lrem(keys.ring, 0, 'c');
    await redis.sadd(keys.parked, 'c');
    expect(await gateway.rejoinClient(keys, 'c')).toBe(0); // parked at its cap: in reach once a slot frees
  });
});

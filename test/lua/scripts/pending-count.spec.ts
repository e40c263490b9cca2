import { describe, expect, it } from '@jest/globals';
import { decodeEntry } from '../../../lib/core/model/codec.js';
import { claimAs } from '../../support/redis.js';
import {
  redis,
  gateway,
  keys,
  worker,
  entry,
  enqueueWith,
  enqueue,
  claim,
  pairsOf,
  ids,
  useLuaHarness,
} from '../harness.js';

useLuaHarness();

describe('the pending count (what stats and the dashboard read in O(1))', () => {
  /** What the clients' lists and priority sets really hold. */
  async function actual(clients: readonly string[]): Promise<number> {
    let total = 0;
    for (const clientId of clients)
      total += (await redis.llen(keys.pending(clientId))) + (await redis.zcard(keys.priority(clientId)));
    return total;
  }
  const counted = async () => Number(await redis.get(keys.pendingCount));

  it('follows every script that adds or takes pending tasks, priorities and delays included', async () => {
    const clients = ['a', 'b', 'c'];
    await enqueueWith([
      ['a', '1'],
      ['a', '2'],
      ['b', '3', { priority: 5 }],
      ['c', '4', { delayMs: 60_000 }],
      ['c', '5'],
    ]);
    expect(await counted()).toBe(4);
    expect(await actual(clients)).toBe(4);

    const claimed = pairsOf(await claim('a', 3));
    expect(await counted()).toBe(1);
    expect(await actual(clients)).toBe(1);

    // Back to the head of their lists (a shutdown, a recovery).
    const held = [];
    for (let i = 0; i < claimed.length; i += 2) {
      const { entry: decoded } = decodeEntry(claimed[i + 1]) as {
        ok: true;
        entry: { envelope: { clientId: string; priority?: number } };
      };
      held.push({ token: claimed[i], clientId: decoded.envelope.clientId, priority: decoded.envelope.priority ?? 0 });
    }
    expect(await gateway.requeue(keys, worker, false, held.reverse())).toBe(3);
    expect(await counted()).toBe(4);

    // A delayed task promoted, a waiting one cancelled, a dead letter requeued.
    const [delayed] = await redis.zrange(keys.delayed, '0', '0');
    expect(await gateway.promote(keys, [{ entry: delayed, clientId: 'c', priority: 0 }])).toBe(1);
    expect(await counted()).toBe(5);
    const [waiting] = await redis.lrange(keys.pending('a'), -1, -1);
    expect(await gateway.track.cancel(keys, { clientId: 'a', entry: waiting, priority: 0, id: 'x' })).toBe(true);
    expect(await counted()).toBe(4);
    const record = JSON.stringify({ id: '9', clientId: 'b', payload: 1, reason: 'failed' });
    await redis.lpush(keys.deadLetters, record);
    expect(
      await gateway.requeueDeadLetters(keys, [{ raw: record, clientId: 'b', entry: entry('9', 'b'), priority: 0 }]),
    ).toBe(1);
    expect(await counted()).toBe(5);
    expect(await actual(clients)).toBe(5);

    pairsOf(await claim('a', 10));
    expect(await counted()).toBe(0);
    expect(await actual(clients)).toBe(0);
  });

  it('is set right by the first claim that finds no client waiting, whatever made it drift', async () => {
    await enqueue(['a', ['1', '2']]);
    await redis.set(keys.pendingCount, 40); // a hand edit, a quarantined list: the count no longer matches
    expect(await redis.get(keys.auditWanted)).toBeNull();
    expect(ids(await claim('a', 10))).toEqual(['1', '2']);
    expect(await counted()).toBe(0);
    // Counted above what it reached: the ring audit is asked to look for a client stranded off the ring.
    expect(Number(await redis.get(keys.auditWanted))).toBeGreaterThan(0);
    await redis.set(keys.pendingCount, 'not a number');
    await enqueue(['a', ['3']]);
    expect(await counted()).toBe(1);
    expect(await redis.hkeys(keys.faults)).toContain(keys.pendingCount);
  });

  it('is not reset while a client waits parked at its cap', async () => {
    await enqueue(['a', ['1', '2', '3']]);
    const [first] = pairsOf(await claimAs(redis, keys, worker, 10, [], 1));
    expect(first).toBeDefined();
    expect(await redis.smembers(keys.parked)).toEqual(['a']);
    pairsOf(await claimAs(redis, keys, worker, 10, [], 1));
    expect(await counted()).toBe(2);
  });
});

describe('snapshotCounters', () => {
  it('records the counters once per minute, and forgets minutes older than an hour', async () => {
    await redis.hset(keys.counters, 'completed', 7, 'failed', 2);
    const stale = Math.floor(Date.now() / 60_000) - 90;
    await redis.hset(keys.history, String(stale), '1 0 0 0 0');
    const [first, second] = await Promise.all([gateway.snapshotCounters(keys), gateway.snapshotCounters(keys)]);
    expect([first, second].filter(Boolean)).toHaveLength(1);
    const history = await redis.hgetall(keys.history);
    expect(Object.keys(history)).toHaveLength(1);
    const [minute, value] = Object.entries(history)[0];
    const [at, ...counts] = value.split(' ').map(Number);
    expect(Math.floor(at / 60_000)).toBe(Number(minute));
    expect(counts).toEqual([7, 2, 0, 0]);
  });

  it('writes nothing when the counters key holds another type', async () => {
    await redis.set(keys.counters, 'junk');
    expect(await gateway.snapshotCounters(keys)).toBe(false);
    expect(await redis.exists(keys.history)).toBe(0);
  });
});

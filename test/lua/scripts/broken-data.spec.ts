import { describe, expect, it } from '@jest/globals';
import { decodeEntry } from '../../../lib/core/model/codec.js';
import { claimAs, snapshotKeys } from '../../support/redis.js';
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
  ids,
  useLuaHarness,
  type Options,
} from '../harness.js';

useLuaHarness();

describe('broken data in Redis: no script fails halfway, one broken client never stops the others', () => {
  /** Every task id the queue holds anywhere a task can be: pending, claimed, delayed, dead. */
  async function everyTaskId(): Promise<string[]> {
    const raws = [
      ...(await redis.lrange(keys.pending('a'), 0, -1)),
      ...(await redis.lrange(keys.pending('b'), 0, -1)),
      ...(await redis.lrange(keys.pending('c'), 0, -1)),
      ...Object.values(await redis.hgetall(keys.processing(worker))),
      ...(await redis.zrange(keys.delayed, '0', '-1')),
    ];
    return raws
      .map((raw) => (decodeEntry(raw) as { ok: true; entry: { envelope: { id: string } } }).entry.envelope.id)
      .sort();
  }

  it("quarantines a client pending list of the wrong type and claims every other client's tasks", async () => {
    await enqueue(['a', ['a1', 'a2']], ['c', ['c1', 'c2']]);
    // A stray SET on client b's list, with b on the ring (as a crashed tool or a typo would leave it).
    await redis.set(keys.pending('b'), 'x');
    await redis.rpush(keys.ring, 'b');
    const claimed = ids(await claim('a', 10));
    expect(claimed.sort()).toEqual(['a1', 'a2', 'c1', 'c2']);
    // Nothing was popped and lost: each claimed task is held, b's bad value is kept aside and recorded.
    expect(await everyTaskId()).toEqual(['a1', 'a2', 'c1', 'c2']);
    expect(await redis.get(`${keys.pending('b')}:quarantined:1`)).toBe('x');
    expect(await redis.hget(keys.faults, keys.pending('b'))).toMatch(
      /held a string, not a list; renamed to .*:quarantined:1$/,
    );
    expect(await redis.lrange(keys.ring, 0, -1)).toEqual([]);
    // b's next task works again.
    expect(await enqueue(['b', ['b1']])).toBe(1);
    expect(ids(await claim('b', 1))).toEqual(['b1']);
  });

  it('reads a weight that is not a number as 1, records it, and keeps claiming', async () => {
    await enqueue(['a', ['a1', 'a2']], ['c', ['c1']]);
    await redis.hset(keys.weights, 'a', 'abc');
    expect(ids(await claim('a', 10)).sort()).toEqual(['a1', 'a2', 'c1']);
    expect(await redis.hget(keys.faults, `${keys.weights} a`)).toMatch(/is "abc", not a number; used 1$/);
  });

  it('heals a prioritized count that is not an integer so no priority task is hidden', async () => {
    await enqueueWith([
      ['a', 'p1', { priority: 5 }],
      ['a', 'n1'],
    ]);
    await redis.set(keys.prioritized, 'garbage');
    expect(ids(await claim('a', 10))).toEqual(['p1', 'n1']);
    expect(await redis.hget(keys.faults, keys.prioritized)).toMatch(/not an integer counter/);
  });

  it('refuses a claim against a broken queue-level key before popping anything, naming the key', async () => {
    await enqueue(['a', ['a1', 'a2']]);
    await redis.set(keys.inflight, 'x');
    await expect(claimAs(redis, keys, worker, 5, [], 1)).rejects.toThrow(
      `key ${keys.inflight} holds a string, not a hash; nothing was changed`,
    );
    expect(await everyTaskId()).toEqual(['a1', 'a2']);
    expect(await redis.lrange(keys.ring, 0, -1)).toEqual(['a']);
  });

  it('keeps a task held when a settle script meets a broken key (retry, dead letter), and settles it once healed', async () => {
    await enqueue(['a', ['a1', 'a2']]);
    const [t1, , t2] = (await claim('a', 2)) as string[];
    await redis.set(keys.delayed, 'x');
    await expect(gateway.retry(keys, worker, t1, 10)).rejects.toThrow(/holds a string, not a zset/);
    await redis.set(keys.deadLetters, 'x');
    await expect(gateway.deadLetter(keys, worker, t2, { record: '{}', cap: 5 })).rejects.toThrow(
      /holds a string, not a list/,
    );
    expect(await redis.hlen(keys.processing(worker))).toBe(2);
    await redis.del(keys.delayed, keys.deadLetters);
    expect(await gateway.retry(keys, worker, t1, 10)).toMatchObject({ kind: 'scheduled' });
    expect(await everyTaskId()).toEqual(['a1', 'a2']);
  });

  it('settles even when the outcome counters key is broken', async () => {
    await enqueue(['a', ['a1']]);
    const [token] = (await claim('a', 1)) as string[];
    await redis.set(keys.counters, 'x');
    expect(await ack(token, 'a1')).toBe(true);
    expect(await redis.hlen(keys.processing(worker))).toBe(0);
  });

  it('enqueues past a client list of the wrong type met midway: the ring in call order, every task counted once', async () => {
    await redis.set(keys.pending('b'), 'x');
    expect(
      await enqueueWith([
        ['a', 'a1'],
        ['a', 'a2'],
        ['b', 'b1'],
        ['c', 'c1'],
      ]),
    ).toEqual([0, 0, 0, 0]);
    expect(await redis.lrange(keys.ring, 0, -1)).toEqual(['a', 'b', 'c']);
    expect(await redis.get(keys.pendingCount)).toBe('4');
    expect(await everyTaskId()).toEqual(['a1', 'a2', 'b1', 'c1']);
    expect(await redis.hget(keys.faults, keys.pending('b'))).toMatch(/held a string, not a list/);
  });

  it("quarantines a priority set of the wrong type met by a client's first task, and puts the client on the ring", async () => {
    await redis.set(keys.priority('b'), 'x');
    expect(await enqueue(['a', ['a1']], ['b', ['b1']], ['c', ['c1']])).toBe(3);
    expect(await redis.hget(keys.faults, keys.priority('b'))).toMatch(/held a string, not a zset/);
    expect(await redis.lrange(keys.ring, 0, -1)).toEqual(['a', 'b', 'c']);
    expect(await redis.get(keys.pendingCount)).toBe('3');
    expect(ids(await claim('a', 5))).toEqual(['a1', 'b1', 'c1']);
  });

  it('resets a pending count that is not an integer to the tasks the call added, recorded, and enqueues', async () => {
    await redis.set(keys.pendingCount, 'many');
    expect(await enqueue(['a', ['a1', 'a2']])).toBe(2);
    expect(await redis.get(keys.pendingCount)).toBe('2');
    expect(await redis.hget(keys.faults, keys.pendingCount)).toMatch(/not an integer counter/);
    expect(await redis.lrange(keys.ring, 0, -1)).toEqual(['a']);
  });

  it('enqueues into a client whose list had the wrong type (quarantined), all or nothing for the batch', async () => {
    await redis.set(keys.pending('b'), 'x');
    await redis.rpush(keys.dedup('k'), 'not a string');
    expect(
      await enqueueWith([
        ['a', 'a1'],
        ['b', 'b1'],
        ['c', 'c1', { dedupKey: 'k' }],
      ]),
    ).toEqual([0, 0, 0]);
    expect(await everyTaskId()).toEqual(['a1', 'b1', 'c1']);
    expect(await redis.get(keys.dedup('k'))).toBe('c1');
    expect(Object.keys(await redis.hgetall(keys.faults)).sort()).toEqual(
      ['#quarantined', keys.dedup('k'), keys.pending('b')].sort(),
    );
  });

  it('sets a broken ring aside (what it held was gone already) and enqueues, claimably, all the same', async () => {
    await redis.set(keys.ring, 'x');
    expect(await enqueue(['a', ['a1']], ['b', ['b1']])).toBe(2);
    expect(await redis.hget(keys.faults, keys.ring)).toMatch(/held a string, not a list/);
    expect(await redis.lrange(keys.ring, 0, -1)).toEqual(['a', 'b']);
    expect(await redis.get(keys.pendingCount)).toBe('2');
    expect(ids(await claim('a', 5)).sort()).toEqual(['a1', 'b1']);
  });

  it('sets aside a processing hash of another type before anything else (40 clients, 10 prioritized tasks, a cap), and claims every task intact', async () => {
    const tasks: [string, string, Options?][] = [];
    for (let c = 0; c < 40; c++) tasks.push([`c${c}`, `t${c}`, c % 4 === 0 ? { priority: 5 } : undefined]);
    await enqueueWith(tasks);
    await gateway.heartbeat(keys, worker, 60_000);
    await redis.set(keys.processing(worker), 'x');
    const before = await snapshotKeys(redis, prefix);
    // A cap key of the wrong type fails the claim first: it changes nothing (the processing hash included).
    await redis.set(keys.counted, 'x');
    await expect(
      gateway.claim(keys, {
        workerId: worker,
        wanted: 36,
        clientConcurrency: 2,
        leaseMs: 60_000,
        tokenPrefix: 'p.',
        acks: [],
      }),
    ).rejects.toThrow(`key ${keys.counted} holds a string, not a hash; nothing was changed`);
    await redis.del(keys.counted);
    expect(await snapshotKeys(redis, prefix)).toEqual(before);
    const claimed = ids(
      (
        await gateway.claim(keys, {
          workerId: worker,
          wanted: 100,
          clientConcurrency: 2,
          leaseMs: 60_000,
          tokenPrefix: 'p.',
          acks: [],
        })
      ).outcome,
    );
    expect(claimed.sort()).toEqual(tasks.map(([, id]) => id).sort());
    expect(await redis.get(`${keys.processing(worker)}:quarantined:1`)).toBe('x');
    expect(await redis.hget(keys.faults, keys.processing(worker))).toMatch(/held a string, not a hash/);
  });
});

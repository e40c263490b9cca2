import { describe, expect, it } from '@jest/globals';
import { encodeEntry } from '../../../lib/core/model/codec.js';
import { pushEnqueueFields } from '../../../lib/core/redis/enqueue-fields.js';
import { claimAs, keysUnder } from '../../support/redis.js';
import {
  redis,
  gateway,
  prefix,
  keys,
  worker,
  entry,
  enqueue,
  claim,
  pairsOf,
  ids,
  useLuaHarness,
} from '../harness.js';

useLuaHarness();

describe('claimTasks', () => {
  it('cuts an idle lease to now + leaseMs when it takes tasks, and leaves it when it takes none', async () => {
    const request = { workerId: worker, wanted: 5, clientConcurrency: 0, leaseMs: 35_000, acks: [] };
    const { now } = await gateway.heartbeat(keys, worker, 600_000);
    const none = await gateway.claim(keys, { ...request, tokenPrefix: 'n.' });
    expect(ids(none.outcome)).toEqual([]);
    expect(Number(await redis.zscore(keys.workers, worker))).toBe(now + 600_000);
    await enqueue(['a', ['1']]);
    const [seconds, micros] = await redis.time();
    const before = Number(seconds) * 1000 + Math.floor(Number(micros) / 1000);
    const some = await gateway.claim(keys, { ...request, tokenPrefix: 's.' });
    expect(ids(some.outcome)).toEqual(['1']);
    const cut = Number(await redis.zscore(keys.workers, worker));
    expect(cut).toBeGreaterThanOrEqual(before + 35_000);
    expect(cut).toBeLessThan(before + 40_000);
    // A lease shorter than that is left as it is (the heartbeat renews it).
    await gateway.heartbeat(keys, worker, 20_000);
    const shortLease = Number(await redis.zscore(keys.workers, worker));
    await enqueue(['a', ['2']]);
    expect(ids((await gateway.claim(keys, { ...request, tokenPrefix: 't.' })).outcome)).toEqual(['2']);
    expect(Number(await redis.zscore(keys.workers, worker))).toBe(shortLease);
  });

  it('names every key it touches from the base it is given, as keys.ts names them (a group, weights, rates, a cap, a fault)', async () => {
    // A consumer group's keys (base `<root>:g:audit`), with every feature on, so every key gets written.
    const group = keys.forGroup('audit');
    await redis.sadd(keys.groups, 'audit');
    await gateway.heartbeat(group, worker, 30_000);
    const args: (string | number)[] = [];
    const task = (id: string, clientId: string, priority = 0) =>
      pushEnqueueFields(args, {
        id,
        clientId,
        entry: entry(id, clientId),
        priority,
        delayMs: 0,
        deduplicationTtlMs: 60_000,
        awaitsReply: false,
      });
    ['1', '2', '3'].forEach((id) => task(id, 'a'));
    task('4', 'b');
    task('5', 'b', 5);
    await redis.enqueueTasks(keys.root, ...args);
    await redis.hset(group.weights, 'a', '2');
    await redis.hset(group.rates, 'b', '1'); // one token: b's second task waits, throttled
    await redis.set(group.pending('d'), 'not a list'); // a client key broken by a stray command
    await redis.rpush(group.ring, 'd');
    const first = await gateway.claim(group, {
      workerId: worker,
      wanted: 10,
      clientConcurrency: 0,
      leaseMs: 60_000,
      tokenPrefix: 'x.',
      acks: [],
    });
    expect(ids(first.outcome)).toEqual(['1', '2', '5', '3']);
    // Under a cap of 1, with the first token acknowledged: c is parked after one task.
    const more: (string | number)[] = [];
    pushEnqueueFields(more, {
      id: '6',
      clientId: 'c',
      entry: entry('6', 'c'),
      priority: 0,
      delayMs: 0,
      deduplicationTtlMs: 60_000,
      awaitsReply: false,
    });
    pushEnqueueFields(more, {
      id: '7',
      clientId: 'c',
      entry: entry('7', 'c'),
      priority: 0,
      delayMs: 0,
      deduplicationTtlMs: 60_000,
      awaitsReply: false,
    });
    await redis.enqueueTasks(keys.root, ...more);
    const second = await gateway.claim(group, {
      workerId: worker,
      wanted: 10,
      clientConcurrency: 1,
      leaseMs: 60_000,
      tokenPrefix: 'y.',
      acks: [pairsOf(first.outcome)[0]],
    });
    expect(ids(second.outcome)).toEqual(['6']);
    // Each key written under the name keys.ts gives it...
    expect(await redis.hlen(group.processing(worker))).toBe(4);
    expect(await redis.hget(group.counters, 'completed')).toBe('1');
    expect(await redis.hlen(group.counted)).toBe(1);
    expect(await redis.hget(group.inflight, 'c')).toBe('1');
    expect(await redis.smembers(group.parked)).toEqual(['c']);
    expect(await redis.zrange(group.throttled, '0', '-1')).toEqual(['b']);
    expect(await redis.hexists(group.buckets, 'b')).toBe(1);
    expect(await redis.get(group.prioritized)).toBe('0');
    expect(await redis.get(group.pendingCount)).toBe('2'); // b's plain task and c's second
    expect(await redis.hexists(group.faults, group.pending('d'))).toBe(1);
    // ...and nothing outside those names (the ring is empty: a drained, b throttled, c parked, d quarantined;
    // the root's workers and heartbeats are this file's default registration).
    const expected = [
      keys.workers,
      keys.heartbeats,
      keys.groups,
      group.processing(worker),
      group.workers,
      group.heartbeats,
      group.weights,
      group.rates,
      group.buckets,
      group.throttled,
      group.counted,
      group.inflight,
      group.parked,
      group.counters,
      group.sequence,
      group.prioritized,
      group.pendingCount,
      group.pending('b'),
      group.pending('c'),
      group.faults,
      `${group.pending('d')}:quarantined:1`,
    ];
    expect((await keysUnder(redis, prefix)).sort()).toEqual(expected.sort());
  });

  it('moves tasks from the head into the processing hash under increasing tokens', async () => {
    await enqueue(['a', ['1', '2', '3']]);
    const reply = await claim('a', 2);
    expect(ids(reply)).toEqual(['1', '2']);
    const tokens = (reply as string[]).filter((_, i) => i % 2 === 0);
    expect(Number(tokens[1])).toBe(Number(tokens[0]) + 1);
    expect(Object.keys(await redis.hgetall(keys.processing(worker))).sort()).toEqual([...tokens].sort());
    expect(await redis.llen(keys.pending('a'))).toBe(1);
    expect(await redis.lrange(keys.ring, 0, -1)).toEqual(['a']);
  });

  it('takes one task per client per visit, round-robin over the ring, whatever the number asked', async () => {
    await enqueue(['a', ['1', '2', '3']], ['b', ['4']], ['c', ['5', '6']]);
    expect(ids(await claim('a', 10))).toEqual(['1', '4', '5', '2', '6', '3']);
    expect(await redis.llen(keys.ring)).toBe(0);
  });

  it('removes the client from the ring when it has nothing left, and keeps rotating the others', async () => {
    await enqueue(['a', ['1', '2']], ['b', ['3']]);
    expect(ids(await claim('a', 2))).toEqual(['1', '3']);
    expect(await redis.lrange(keys.ring, 0, -1)).toEqual(['a']);
  });

  it('says whether it left the ring empty (drained): after taking the last waiting task, and when nothing was there', async () => {
    await enqueue(['a', ['1', '2']], ['b', ['3']]);
    const request = { workerId: worker, clientConcurrency: 0, acks: [] };
    const first = await gateway.claim(keys, { ...request, wanted: 1, leaseMs: 60_000, tokenPrefix: 'p0.' });
    expect([ids(first.outcome), first.drained]).toEqual([['1'], false]); // a stayed on the ring with task 2
    const some = await gateway.claim(keys, { ...request, wanted: 1, leaseMs: 60_000, tokenPrefix: 'p1.' });
    expect([ids(some.outcome), some.drained]).toEqual([['3'], false]); // b left the ring; a still waits with task 2
    const last = await gateway.claim(keys, { ...request, wanted: 1, leaseMs: 60_000, tokenPrefix: 'p2.' });
    expect([ids(last.outcome), last.drained]).toEqual([['2'], true]); // took exactly the last one
    const none = await gateway.claim(keys, { ...request, wanted: 5, leaseMs: 60_000, tokenPrefix: 'p3.' });
    expect([ids(none.outcome), none.drained]).toEqual([[], true]);
    // Only acknowledging, or refused, it tells nothing about the queue.
    await enqueue(['c', ['4']]);
    const acked = await gateway.claim(keys, {
      ...request,
      wanted: 0,
      leaseMs: 60_000,
      tokenPrefix: 'p4.',
      acks: pairsOf(last.outcome).slice(0, 1),
    });
    expect(acked.drained).toBe(false);
    await redis.set(keys.paused, '1');
    expect((await gateway.claim(keys, { ...request, wanted: 5, leaseMs: 60_000, tokenPrefix: 'p5.' })).drained).toBe(
      false,
    );
  });

  it("takes a lone client's tasks in one pop, as a visit per task would: in order, tokens rising, the ring and the pending count kept right", async () => {
    await enqueue(['a', ['1', '2', '3', '4', '5']]);
    const request = { workerId: worker, clientConcurrency: 0, acks: [] };
    const some = await gateway.claim(keys, { ...request, wanted: 3, leaseMs: 60_000, tokenPrefix: 'p0.' });
    expect([ids(some.outcome), some.drained]).toEqual([['1', '2', '3'], false]);
    const tokens = pairsOf(some.outcome).filter((_, i) => i % 2 === 0);
    expect([...tokens].sort()).toEqual(tokens);
    expect(await redis.hlen(keys.processing(worker))).toBe(3);
    expect(await redis.lrange(keys.ring, 0, -1)).toEqual(['a']);
    expect(await redis.get(keys.pendingCount)).toBe('2');
    // More asked than it holds: the rest, the client leaves the ring, the queue is drained.
    const rest = await gateway.claim(keys, { ...request, wanted: 5, leaseMs: 60_000, tokenPrefix: 'p1.' });
    expect([ids(rest.outcome), rest.drained]).toEqual([['4', '5'], true]);
    expect(await redis.lrange(keys.ring, 0, -1)).toEqual([]);
    expect(await redis.get(keys.pendingCount)).toBe('0');
  });

  it("drops a lone client left on the ring with nothing pending, and heals a lone client's list of the wrong type", async () => {
    await redis.rpush(keys.ring, 'a');
    const stale = await gateway.claim(keys, {
      workerId: worker,
      clientConcurrency: 0,
      acks: [],
      wanted: 4,
      leaseMs: 60_000,
      tokenPrefix: 'p0.',
    });
    expect([ids(stale.outcome), stale.drained]).toEqual([[], true]);
    expect(await redis.lrange(keys.ring, 0, -1)).toEqual([]);
    await redis.set(keys.pending('b'), 'x');
    await redis.rpush(keys.ring, 'b');
    const broken = await gateway.claim(keys, {
      workerId: worker,
      clientConcurrency: 0,
      acks: [],
      wanted: 4,
      leaseMs: 60_000,
      tokenPrefix: 'p1.',
    });
    expect(ids(broken.outcome)).toEqual([]);
    expect(await redis.hget(keys.faults, keys.pending('b'))).toMatch(/held a string, not a list/);
    expect(await redis.lrange(keys.ring, 0, -1)).toEqual([]);
    await enqueue(['b', ['b1']]);
    expect(ids(await claim('b', 4))).toEqual(['b1']);
  });

  it('acknowledges the given tokens first, reporting those no longer held as lost', async () => {
    await enqueue(['a', ['1', '2', '3']]);
    const [t1, , t2] = (await claim('a', 2)) as string[];
    await redis.hdel(keys.processing(worker), t2); // recovered by a reaper meanwhile
    const { lost, outcome } = await gateway.claim(keys, {
      workerId: worker,
      wanted: 1,
      clientConcurrency: 0,
      leaseMs: 60_000,
      tokenPrefix: 'again.',
      acks: [t1, t2],
    });
    expect(lost).toEqual([t2]);
    expect(ids(outcome)).toEqual(['3']);
    expect(Object.keys(await redis.hgetall(keys.processing(worker)))).toEqual([pairsOf(outcome)[0]]);
  });

  it('acknowledges one token alone (a worker of concurrency 1) as it does several: held, removed and counted completed; no longer held, reported lost and not counted', async () => {
    await enqueue(['a', ['1', '2', '3']]);
    const ackOne = (token: string, tokenPrefix: string) =>
      gateway.claim(keys, {
        workerId: worker,
        wanted: 1,
        clientConcurrency: 0,
        leaseMs: 60_000,
        tokenPrefix,
        acks: [token],
      });
    const [t1] = (await claim('a', 1)) as string[];
    const held = await ackOne(t1, 'one.');
    expect(held.lost).toEqual([]);
    expect(ids(held.outcome)).toEqual(['2']);
    expect(await redis.hget(keys.counters, 'completed')).toBe('1');
    const [t2] = pairsOf(held.outcome);
    await redis.hdel(keys.processing(worker), t2); // recovered by a reaper meanwhile
    const lost = await ackOne(t2, 'two.');
    expect(lost.lost).toEqual([t2]);
    expect(ids(lost.outcome)).toEqual(['3']);
    expect(await redis.hget(keys.counters, 'completed')).toBe('1');
    expect(Object.keys(await redis.hgetall(keys.processing(worker)))).toEqual([pairsOf(lost.outcome)[0]]);
  });

  it('claims nothing from a paused queue but still acknowledges, and claims again once resumed', async () => {
    await enqueue(['a', ['1', '2']]);
    const [t1] = (await claim('a', 1)) as string[];
    await redis.set(keys.paused, '1');
    const { lost, outcome } = await gateway.claim(keys, {
      workerId: worker,
      wanted: 5,
      clientConcurrency: 0,
      leaseMs: 60_000,
      tokenPrefix: 'again.',
      acks: [t1],
    });
    expect([lost, outcome]).toEqual([[], { kind: 'paused' }]);
    expect(await redis.hlen(keys.processing(worker))).toBe(0);
    expect(await redis.hget(keys.counters, 'completed')).toBe('1');
    await redis.del(keys.paused);
    expect(ids(await claim('a', 5))).toEqual(['2']);
  });

  it('removes a stale ring entry when the client has nothing left', async () => {
    await redis.rpush(keys.ring, 'ghost');
    expect(await claim('ghost', 1)).toEqual([]);
    expect(await redis.llen(keys.ring)).toBe(0);
  });

  it('refuses a worker that is not registered', async () => {
    await enqueue(['a', ['1']]);
    expect(await claim('a', 1, 'unknown-worker')).toBe('unregistered');
    expect(await redis.llen(keys.pending('a'))).toBe(1);
  });

  it('refuses a worker whose lease has expired, and claims again once it renewed it', async () => {
    await enqueue(['a', ['1']]);
    await redis.zadd(keys.workers, 1, worker); // the lease ran out long ago (Redis time, ms)
    expect(await claim('a', 1)).toBe('unregistered');
    expect(await redis.llen(keys.pending('a'))).toBe(1);
    expect(await redis.hlen(keys.processing(worker))).toBe(0);
    await gateway.heartbeat(keys, worker, 30_000);
    expect(ids(await claim('a', 1))).toEqual(['1']);
  });

  it('never hands the same task to two claims', async () => {
    await enqueue(['a', Array.from({ length: 100 }, (_, i) => String(i))]);
    const replies = await Promise.all(Array.from({ length: 20 }, () => claim('a', 7)));
    const claimed = replies.flatMap(ids);
    expect(claimed).toHaveLength(100);
    expect(new Set(claimed).size).toBe(100);
  });
});

describe('rotation over the ring', () => {
  it('hands successive one-task claims to the clients round-robin', async () => {
    await enqueue(['a', ['1', '2']], ['b', ['3', '4']], ['c', ['5']]);
    const order: string[] = [];
    for (let i = 0; i < 5; i++) {
      order.push(...ids(await claim('', 1)));
    }
    expect(order).toEqual(['1', '3', '5', '2', '4']);
    expect(await redis.llen(keys.ring)).toBe(0);
  });

  it('gives a client of weight 3 three tasks per visit, across one-task claims and bigger ones', async () => {
    await enqueue(['a', ['a1', 'a2', 'a3', 'a4', 'a5', 'a6', 'a7']], ['b', ['b1', 'b2', 'b3']]);
    await redis.hset(keys.weights, 'a', 3);
    const order: string[] = [];
    for (let i = 0; i < 4; i++) order.push(...ids(await claim('', 1)));
    order.push(...ids(await claim('', 6)));
    expect(order).toEqual(['a1', 'a2', 'a3', 'b1', 'a4', 'a5', 'a6', 'b2', 'a7', 'b3']);
    // Nothing is left behind: the ring and the visit credit are empty.
    expect(await redis.exists(keys.ring, keys.credit)).toBe(0);
  });

  it('takes a rate-limited client off the ring once its burst is used, until releaseThrottled puts it back', async () => {
    await enqueue(['slow', ['s1', 's2', 's3', 's4']], ['fast', ['f1', 'f2', 'f3', 'f4']]);
    await redis.hset(keys.rates, 'slow', 10); // 10/s: a burst of 1, then one task per 100 ms
    const { outcome, throttledUntil = 0 } = await gateway.claim(keys, {
      workerId: worker,
      wanted: 8,
      clientConcurrency: 0,
      leaseMs: 60_000,
      tokenPrefix: 'rated.',
      acks: [],
    });
    // slow gets its one token, then is throttled; fast drains meanwhile.
    expect(ids(outcome)).toEqual(['s1', 'f1', 'f2', 'f3', 'f4']);
    const [seconds, micros] = await redis.time();
    const now = Number(seconds) * 1000 + Math.floor(Number(micros) / 1000);
    expect(throttledUntil - now).toBeGreaterThan(50);
    expect(throttledUntil - now).toBeLessThanOrEqual(100);
    expect(await redis.lrange(keys.ring, 0, -1)).toEqual([]);
    expect(Number(await redis.zscore(keys.throttled, 'slow'))).toBe(throttledUntil);
    // Before its token is due nothing is released; at the due time it is back on the ring.
    expect(await gateway.releaseThrottled(keys, throttledUntil - 1)).toEqual({
      released: 0,
      nextDueAt: throttledUntil,
    });
    expect(await gateway.releaseThrottled(keys, throttledUntil)).toEqual({ released: 1 });
    expect(await redis.lrange(keys.ring, 0, -1)).toEqual(['slow']);
  });

  it('brings a throttled client whose token is due back itself: a busy worker needs no timer for it', async () => {
    await enqueue(['slow', ['s1', 's2']], ['fast', ['f1', 'f2', 'f3']]);
    await redis.hset(keys.rates, 'slow', 10); // a burst of 1, then one task per 100 ms
    const claimed = async (wanted: number) =>
      ids(
        (
          await gateway.claim(keys, {
            workerId: worker,
            wanted,
            clientConcurrency: 0,
            leaseMs: 60_000,
            tokenPrefix: 't.',
            acks: [],
          })
        ).outcome,
      );
    expect(await claimed(3)).toEqual(['s1', 'f1', 'f2']);
    expect(await redis.zcard(keys.throttled)).toBe(1);
    // Its token comes due (the bucket's clock set back by 200 ms, the due time to now), and no
    // releaseThrottled runs: the next claim visits it anyway.
    const [seconds, micros] = await redis.time();
    const now = Number(seconds) * 1000 + Math.floor(Number(micros) / 1000);
    await redis.hset(keys.buckets, 'slow', `0:${now - 200}`);
    await redis.zadd(keys.throttled, now - 1, 'slow');
    expect(await claimed(3)).toEqual(['f3', 's2']);
    expect(await redis.exists(keys.throttled, keys.ring)).toBe(0);
  });

  it('ends a weighted visit early at the per-client cap, and parks the client', async () => {
    await enqueue(['a', ['a1', 'a2', 'a3']], ['b', ['b1', 'b2']]);
    await redis.hset(keys.weights, 'a', 3);
    expect(ids(await claimAs(redis, keys, worker, 3, [], 1))).toEqual(['a1', 'b1']);
    expect(await redis.smembers(keys.parked)).toEqual(expect.arrayContaining(['a', 'b']));
    expect(await redis.hlen(keys.credit)).toBe(0);
  });
});

describe('claimTasks sent twice (ioredis resends a call whose reply a reconnection lost)', () => {
  it('claims other tasks under other tokens the second time, overwriting nothing', async () => {
    await enqueue(['a', ['1', '2', '3', '4']]);
    const call = async () =>
      (
        await gateway.claim(keys, {
          workerId: worker,
          wanted: 2,
          clientConcurrency: 0,
          leaseMs: 60_000,
          tokenPrefix: 'same-prefix.',
          acks: [],
        })
      ).outcome;
    const first = await call();
    const second = await call();
    expect([...ids(first), ...ids(second)]).toEqual(['1', '2', '3', '4']);
    const held = await redis.hgetall(keys.processing(worker));
    expect(Object.keys(held)).toHaveLength(4);
  });
});

describe('per-client concurrency cap', () => {
  it('parks a client at its cap (others go on), and puts it back on the ring when one of its tasks is acknowledged', async () => {
    await enqueue(['a', ['a1', 'a2', 'a3']], ['b', ['b1', 'b2']]);
    const first = await claimAs(redis, keys, worker, 10, [], 1);
    expect(ids(first)).toEqual(['a1', 'b1']);
    expect(await redis.llen(keys.ring)).toBe(0);
    expect((await redis.smembers(keys.parked)).sort()).toEqual(['a', 'b']);
    expect(await redis.hgetall(keys.inflight)).toEqual({ a: '1', b: '1' });
    const tokenA1 = (first as string[])[0];
    expect(ids(await claimAs(redis, keys, worker, 10, [tokenA1], 1))).toEqual(['a2']);
    expect(await redis.hgetall(keys.inflight)).toEqual({ a: '1', b: '1' });
    expect(await redis.smembers(keys.parked)).toEqual(expect.arrayContaining(['a', 'b']));
  });

  it('releases the slot on retry, dead letter and requeue too, and forgets a client with nothing left', async () => {
    await enqueue(['a', ['a1', 'a2', 'a3', 'a4']]);
    const [t1] = (await claimAs(redis, keys, worker, 5, [], 1)) as string[];
    expect(await gateway.retry(keys, worker, t1, 60_000)).toMatchObject({ kind: 'scheduled' });
    const [t2] = (await claimAs(redis, keys, worker, 5, [], 1)) as string[];
    expect(await gateway.deadLetter(keys, worker, t2, { record: '{}', cap: 5 })).toBe(true);
    const [t3] = (await claimAs(redis, keys, worker, 5, [], 1)) as string[];
    expect(await gateway.requeue(keys, worker, false, [{ token: t3, clientId: 'a', priority: 0 }])).toBe(1);
    expect(await redis.lrange(keys.ring, 0, -1)).toEqual(['a']);
    expect(await redis.exists(keys.inflight, keys.counted, keys.parked)).toBe(0);
    const claimed = (await claimAs(redis, keys, worker, 5, [], 2)) as string[];
    expect(ids(claimed)).toEqual(['a3', 'a4']);
    expect(await redis.llen(keys.ring)).toBe(0);
    expect(await redis.smembers(keys.parked)).toEqual([]);
  });
});

describe('claimTasks: a tracked task is recorded running by the claim that takes it', () => {
  /** A tracked task enqueued as the producer writes it (`"track":1` in its head, its payload last). */
  async function enqueueTracked(id: string, clientId: string, attempts = 0, payload: unknown = { id }): Promise<void> {
    const args: (string | number)[] = [];
    pushEnqueueFields(args, {
      id,
      clientId,
      entry: encodeEntry({ id, clientId, enqueuedAt: 1, track: 1, payload }, attempts),
      priority: 0,
      delayMs: 0,
      deduplicationTtlMs: 60_000,
      awaitsReply: false,
      track: { keepMs: 60_000, liveMs: 60_000 },
    });
    await redis.enqueueTasks(keys.root, ...args);
  }

  const request = { workerId: worker, clientConcurrency: 0, leaseMs: 60_000, acks: [] };

  it("records it running (worker, token, attempt, start), drops its entry key, and names its place; an untracked task's payload that holds the field is not read as its head", async () => {
    await enqueueTracked('t1', 'a', 1);
    // An untracked task whose payload holds the text, reusing the id of a task whose index ended.
    await redis.hset(keys.task('u1'), 'id', 'u1', 'state', 'completed', 'keep', 60_000, 'live', 60_000);
    const args: (string | number)[] = [];
    pushEnqueueFields(args, {
      id: 'u1',
      clientId: 'b',
      entry: encodeEntry({ id: 'u1', clientId: 'b', enqueuedAt: 1, payload: { a: 1, track: 1 } }),
      priority: 0,
      delayMs: 0,
      deduplicationTtlMs: 60_000,
      awaitsReply: false,
    });
    await redis.enqueueTasks(keys.root, ...args);
    expect(await redis.exists(keys.tracked('t1').entry)).toBe(1);
    const reply = await gateway.claim(keys, { ...request, wanted: 5, tokenPrefix: 'p.' });
    expect(ids(reply.outcome)).toEqual(['t1', 'u1']);
    expect(reply.started).toEqual([1]);
    const [token] = pairsOf(reply.outcome);
    const index = await redis.hgetall(keys.task('t1'));
    expect(index).toMatchObject({ state: 'running', worker, token, attempt: '2' });
    expect(Number(index.started)).toBeGreaterThan(0);
    expect(await redis.exists(keys.tracked('t1').entry)).toBe(0);
    expect(await redis.hget(keys.task('u1'), 'state')).toBe('completed');
  });

  it('leaves a task with a cancel asked while it was between places to startTasks, which cancels it before it runs', async () => {
    await enqueueTracked('t1', 'a');
    await redis.hset(keys.task('t1'), 'cancel', 'asked');
    const reply = await gateway.claim(keys, { ...request, wanted: 5, tokenPrefix: 'p.' });
    expect(reply.started).toEqual([]);
    expect(await redis.hget(keys.task('t1'), 'state')).toBe('pending');
    const [token] = pairsOf(reply.outcome);
    expect(await gateway.track.start(keys, worker, [{ token, id: 't1', attempt: 1 }])).toEqual(['cancelled']);
    expect(await redis.hget(keys.task('t1'), 'state')).toBe('cancelled');
    expect(await redis.hlen(keys.processing(worker))).toBe(0);
  });

  it("returns each recorded index's keep, and a success sent back with it completes the index with no read of it, where it still exists", async () => {
    await enqueueTracked('t1', 'a');
    await enqueueTracked('t2', 'b');
    const reply = await gateway.claim(keys, { ...request, wanted: 5, tokenPrefix: 'p.' });
    expect(reply.started).toEqual([1, 2]);
    expect(reply.keeps).toEqual(['60000', '60000']);
    const [first, , second] = pairsOf(reply.outcome);
    await redis.del(keys.task('t2')); // its index expired while it ran
    // The keep sent back is the one the success uses (it does not read the index): shorter here, to tell.
    const { lost } = await gateway.claim(keys, {
      ...request,
      wanted: 0,
      tokenPrefix: 'ack.',
      acks: [`${first}\tt1\t30000`, `${second}\tt2\t${reply.keeps?.[1]}`],
    });
    expect(lost).toEqual([]);
    const index = await redis.hgetall(keys.task('t1'));
    expect(index).toMatchObject({ state: 'completed', result: '', worker, token: first });
    expect(Number(index.at)).toBeGreaterThanOrEqual(Number(index.started));
    const ttl = await redis.pttl(keys.task('t1'));
    expect(ttl).toBeGreaterThan(0);
    expect(ttl).toBeLessThanOrEqual(30_000);
    // An index gone is not made again.
    expect(await redis.exists(keys.task('t2'))).toBe(0);
    expect(await redis.hget(keys.counters, 'completed')).toBe('2');
  });

  it("drops a retry's due time and why, and names no place for a task whose index expired (it runs untracked)", async () => {
    await enqueueTracked('t1', 'a', 2);
    await enqueueTracked('t2', 'b');
    await redis.hset(keys.task('t1'), 'state', 'delayed', 'due', Date.now(), 'why', 'retry');
    await redis.del(keys.task('t2'));
    const reply = await gateway.claim(keys, { ...request, wanted: 5, tokenPrefix: 'p.' });
    expect(ids(reply.outcome)).toEqual(['t1', 't2']);
    expect(reply.started).toEqual([1]);
    const index = await redis.hgetall(keys.task('t1'));
    expect(index).toMatchObject({ state: 'running', attempt: '3' });
    expect(index).not.toHaveProperty('due');
    expect(index).not.toHaveProperty('why');
    expect(await redis.exists(keys.task('t2'))).toBe(0);
  });
});

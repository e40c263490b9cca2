import { afterAll, afterEach, beforeEach, describe, expect, it } from '@jest/globals';
import { decodeEntry, encodeEntry } from '../../lib/core/model/codec.js';
import { QueueKeys } from '../../lib/core/redis/keys.js';
import { enqueueAnswer, gatewayOf, type ClaimOutcome } from '../../lib/core/redis/gateway.js';
import { pushEnqueueArgs } from '../../lib/core/producer/task-items.js';
import { claimAs, deleteKeys, keysUnder, openRedis, snapshotKeys, testPrefix, waitFor, type TestRedis } from '../support/redis.js';

const redis: TestRedis = openRedis();
const gateway = gatewayOf(redis);
let prefix: string;
let keys: QueueKeys;
const worker = 'w1';

function entry(id: string, clientId = 'a', attempts = 0): string {
  // Entries are strings in Redis lists: equal content means equal member, so ids keep them apart.
  return encodeEntry({ id, clientId, payload: { id }, enqueuedAt: 1 }, attempts);
}

interface Options {
  priority?: number;
  delayMs?: number;
  dedupKey?: string;
}

/** Calls enqueueTasks as the producer does; resolves with the script's per-task results. */
async function enqueueWith(tasks: [clientId: string, id: string, options?: Options][]): Promise<(0 | string)[]> {
  const args: (string | number)[] = [];
  for (const [clientId, id, options = {}] of tasks) {
    const raw = encodeEntry({ id, clientId, payload: { id }, enqueuedAt: 1, ...(options.priority ? { priority: options.priority } : {}) });
    pushEnqueueArgs(args, {
      id,
      clientId,
      entry: raw,
      priority: options.priority ?? 0,
      delayMs: options.delayMs ?? 0,
      deduplicationKey: options.dedupKey,
      deduplicationTtlMs: 60_000,
      awaitsReply: false,
    });
  }
  return enqueueAnswer(await gateway.enqueue(keys, args));
}

/** Enqueues plain tasks per client; resolves with how many were enqueued. */
async function enqueue(...groups: [clientId: string, ids: string[]][]): Promise<number> {
  const results = await enqueueWith(groups.flatMap(([clientId, ids]) => ids.map((id) => [clientId, id] as [string, string])));
  return results.filter((result) => result === 0).length;
}

/** Claims up to `count` tasks round-robin over the ring (the client id is what the ring says). */
async function claim(_clientId: string, count: number, workerId = worker): Promise<string[] | 'unregistered' | 'paused'> {
  return claimAs(redis, keys, workerId, count);
}

/** Acknowledges one task with ackTasks (as the worker does, alone in its call); resolves 1 or 0. */
async function ack(token: string, id: string, options: { dedupKey?: string; channel?: string; reply?: string } = {}): Promise<boolean> {
  const [held] = await gateway.acknowledge(keys, worker, [token, id, options.dedupKey ?? '', options.channel ?? '', options.reply ?? '', 5_000]);
  return held;
}

/** The token/entry pairs of a claim, or a throw saying why nothing was claimed. */
function pairsOf(reply: readonly string[] | 'unregistered' | 'paused' | ClaimOutcome): readonly string[] {
  if (typeof reply === 'string') throw new Error(`claim refused (${reply})`);
  if ('kind' in reply) return pairsOf(reply.kind === 'claimed' ? reply.pairs : reply.kind);
  return reply;
}

function ids(reply: readonly string[] | 'unregistered' | 'paused' | ClaimOutcome): string[] {
  return pairsOf(reply).filter((_, i) => i % 2 === 1).map((raw) => (decodeEntry(raw) as { ok: true; entry: { envelope: { id: string } } }).entry.envelope.id);
}

beforeEach(async () => {
  prefix = testPrefix('lua');
  keys = new QueueKeys(prefix, 'resize');
  await gateway.heartbeat(keys, worker, 30_000);
});

afterEach(async () => {
  await deleteKeys(redis, prefix);
});

afterAll(async () => {
  await redis.quit();
});

describe('enqueueTasks sent again (a call record makes a resend idempotent)', () => {
  /** One call: its record head (call id, mode), then a plain task, and a task holding a deduplication key another task took first. */
  function callArgs(mode: '1' | '2' | '3'): (string | number)[] {
    const args: (string | number)[] = [`{${mode}60.call-1`];
    pushEnqueueArgs(args, { id: 'r1', clientId: 'a', entry: entry('r1'), priority: 0, delayMs: 0, deduplicationTtlMs: 60_000, awaitsReply: false });
    pushEnqueueArgs(args, { id: 'r2', clientId: 'a', entry: entry('r2'), priority: 0, delayMs: 0, deduplicationKey: 'held', deduplicationTtlMs: 60_000, awaitsReply: false });
    return args;
  }

  it('answers a resend (mode 2) from the record of the first send, writing nothing', async () => {
    await redis.set(keys.dedup('held'), 'other');
    expect(await gateway.enqueue(keys, callArgs('1'))).toEqual([0, 'other']);
    const before = await snapshotKeys(redis, prefix);
    expect(await gateway.enqueue(keys, callArgs('2'))).toEqual([0, 'other']);
    expect(await snapshotKeys(redis, prefix)).toEqual(before);
    expect(await redis.llen(keys.pending('a'))).toBe(1);
    expect(Number(await redis.pttl(keys.call('call-1')))).toBeGreaterThan(50_000);
  });

  it('records an all-written call as its task count, and answers a resend of it with zeros', async () => {
    const args: (string | number)[] = ['{160.call-2'];
    for (const id of ['p1', 'p2', 'p3']) pushEnqueueArgs(args, { id, clientId: 'a', entry: entry(id), priority: 0, delayMs: 0, deduplicationTtlMs: 60_000, awaitsReply: false });
    expect(await gateway.enqueue(keys, args)).toEqual([0, 0, 0]);
    expect(await redis.get(keys.call('call-2'))).toBe('3');
    args[0] = '{260.call-2';
    expect(await gateway.enqueue(keys, args)).toEqual([0, 0, 0]);
    expect(await redis.llen(keys.pending('a'))).toBe(3);
  });

  it('runs a resend whose first send never ran (mode 2, no record) as a first send', async () => {
    expect(await gateway.enqueue(keys, callArgs('2'))).toEqual([0, 0]);
    expect(await redis.llen(keys.pending('a'))).toBe(2);
  });

  it('writes nothing for a resend after the deadline with no record (mode 3), and says so', async () => {
    const before = await snapshotKeys(redis, prefix);
    expect(await gateway.enqueue(keys, callArgs('3'))).toBe(-1);
    expect(() => enqueueAnswer(-1)).toThrow('found no record of an earlier send; it wrote nothing');
    expect(await snapshotKeys(redis, prefix)).toEqual(before);
  });

  it('answers a task whose deduplication key its own id holds as written, and writes it no second time (a resend with no record)', async () => {
    const args = (): (string | number)[] => {
      const list: (string | number)[] = [];
      pushEnqueueArgs(list, { id: 'd1', clientId: 'a', entry: entry('d1'), priority: 0, delayMs: 0, deduplicationKey: 'k', deduplicationTtlMs: 60_000, awaitsReply: false });
      return list;
    };
    expect(await gateway.enqueue(keys, args())).toEqual([0]);
    expect(await gateway.enqueue(keys, args())).toEqual([0]);
    expect(await redis.llen(keys.pending('a'))).toBe(1);
  });
});

describe('enqueueTasks', () => {
  it('appends to the client list and puts the client on the ring once', async () => {
    expect(await enqueue(['a', ['1', '2']])).toBe(2);
    expect(await enqueue(['a', ['3']])).toBe(1);
    expect(await redis.lrange(keys.ring, 0, -1)).toEqual(['a']);
    expect(await redis.llen(keys.pending('a'))).toBe(3);
  });

  it('handles several clients in one call, each joining the ring in order', async () => {
    await enqueue(['a', ['1']], ['b', ['2', '3']]);
    expect(await redis.lrange(keys.ring, 0, -1)).toEqual(['a', 'b']);
    expect(await redis.llen(keys.pending('b'))).toBe(2);
  });

  it('names every key it writes from the root as keys.ts names them (plain, priority, delay, deduplication)', async () => {
    const subscriber = redis.duplicate();
    const due: string[] = [];
    await subscriber.subscribe(keys.dueChannel);
    subscriber.on('message', (_channel: string, message: string) => due.push(message));
    try {
      const results = await enqueueWith([['a', '1'], ['b', '2', { priority: 3 }], ['c', '3', { delayMs: 60_000 }], ['d', '4', { dedupKey: 'k' }], ['d', '5', { dedupKey: 'k' }]]);
      expect(results).toEqual([0, 0, 0, 0, '4']);
      expect(await redis.lrange(keys.ring, 0, -1)).toEqual(['a', 'b', 'd']);
      expect(await redis.llen(keys.pending('a'))).toBe(1);
      expect(await redis.zcard(keys.priority('b'))).toBe(1);
      expect(await redis.get(keys.prioritized)).toBe('1');
      expect(await redis.get(keys.sequence)).toBe('1');
      expect(await redis.zcard(keys.delayed)).toBe(1);
      expect(await redis.get(keys.dedup('k'))).toBe('4');
      expect(await redis.llen(keys.pending('d'))).toBe(1);
      await waitFor(() => due.length === 1, 'the new earliest due time published on the due channel');
      // Nothing was written outside the names above.
      const expected = [keys.ring, keys.pending('a'), keys.pending('d'), keys.priority('b'), keys.prioritized, keys.pendingCount, keys.sequence, keys.delayed, keys.dedup('k')];
      const written = (await keysUnder(redis, prefix)).filter((key) => key !== keys.workers && key !== keys.heartbeats);
      expect(written.sort()).toEqual(expected.sort());
    } finally {
      await subscriber.quit();
    }
  });

  it('enqueues a batch of 2,500 in one call', async () => {
    const many = Array.from({ length: 2_500 }, (_, i) => String(i));
    expect(await enqueue(['a', many])).toBe(2_500);
    expect(await redis.llen(keys.pending('a'))).toBe(2_500);
    expect(await redis.lrange(keys.ring, 0, -1)).toEqual(['a']);
  });

  it('puts 1,500 new clients of one call on the ring in call order (more than one ring push takes)', async () => {
    const clients = Array.from({ length: 1_500 }, (_, i) => `c${i}`);
    expect(await enqueue(...clients.map((clientId): [string, string[]] => [clientId, [`${clientId}-1`]]))).toBe(1_500);
    expect(await redis.lrange(keys.ring, 0, -1)).toEqual(clients);
    expect(await redis.get(keys.pendingCount)).toBe('1500');
  });

  it('goes on after plain tasks with a task with options, in one call: ring order and pending count as if one path', async () => {
    await enqueueWith([['a', '1'], ['b', '2'], ['c', '3', { priority: 2 }], ['d', '4'], ['e', '5', { delayMs: 60_000 }], ['f', '6']]);
    expect(await redis.lrange(keys.ring, 0, -1)).toEqual(['a', 'b', 'c', 'd', 'f']);
    expect(await redis.get(keys.pendingCount)).toBe('5');
    expect(ids(await claim('a', 10))).toEqual(['1', '2', '3', '4', '6']);
  });
});

describe('consumer groups (enqueueTasks fan-out)', () => {
  it('copies each task into every registered group, named as keys.ts names them, in one call', async () => {
    await redis.sadd(keys.groups, 'billing', 'email');
    expect(await enqueueWith([['a', '1'], ['a', '2', { priority: 5 }], ['b', '3', { delayMs: 60_000 }]])).toEqual([0, 0, 0]);
    for (const group of ['billing', 'email']) {
      const scoped = keys.forGroup(group);
      expect(await redis.lrange(scoped.ring, 0, -1)).toEqual(['a']);
      expect(await redis.llen(scoped.pending('a'))).toBe(1);
      expect(await redis.zcard(scoped.priority('a'))).toBe(1);
      expect(await redis.get(scoped.prioritized)).toBe('1');
      expect(await redis.zcard(scoped.delayed)).toBe(1);
      await gateway.heartbeat(scoped, worker, 30_000);
      expect(ids(await claimAs(redis, scoped, worker, 5))).toEqual(['2', '1']);
    }
    // The implicit group was not registered: it gets no copy.
    expect(await redis.exists(keys.ring, keys.pending('a'), keys.delayed)).toBe(0);
  });

  it('keeps the plain path when only the implicit group is registered', async () => {
    await redis.sadd(keys.groups, 'default');
    await enqueue(['a', ['1']]);
    expect(await redis.llen(keys.pending('a'))).toBe(1);
    expect(await redis.exists(keys.forGroup('default').ring)).toBe(1);
  });
});

describe('claimTasks', () => {
  it('names every key it touches from the base it is given, as keys.ts names them (a group, weights, rates, a cap, a fault)', async () => {
    // A consumer group's keys (base `<root>:g:audit`), with every feature on, so every key gets written.
    const group = keys.forGroup('audit');
    await redis.sadd(keys.groups, 'audit');
    await gateway.heartbeat(group, worker, 30_000);
    const args: (string | number)[] = [];
    const task = (id: string, clientId: string, priority = 0) =>
      pushEnqueueArgs(args, { id, clientId, entry: entry(id, clientId), priority, delayMs: 0, deduplicationTtlMs: 60_000, awaitsReply: false });
    ['1', '2', '3'].forEach((id) => task(id, 'a'));
    task('4', 'b');
    task('5', 'b', 5);
    await gateway.enqueue(keys, args);
    await redis.hset(group.weights, 'a', '2');
    await redis.hset(group.rates, 'b', '1'); // one token: b's second task waits, throttled
    await redis.set(group.pending('d'), 'not a list'); // a client key broken by a stray command
    await redis.rpush(group.ring, 'd');
    const first = await gateway.claim(group, { workerId: worker, wanted: 10, clientConcurrency: 0, tokenPrefix: 'x.', acks: [] });
    expect(ids(first.outcome)).toEqual(['1', '2', '5', '3']);
    // Under a cap of 1, with the first token acknowledged: c is parked after one task.
    const more: (string | number)[] = [];
    pushEnqueueArgs(more, { id: '6', clientId: 'c', entry: entry('6', 'c'), priority: 0, delayMs: 0, deduplicationTtlMs: 60_000, awaitsReply: false });
    pushEnqueueArgs(more, { id: '7', clientId: 'c', entry: entry('7', 'c'), priority: 0, delayMs: 0, deduplicationTtlMs: 60_000, awaitsReply: false });
    await gateway.enqueue(keys, more);
    const second = await gateway.claim(group, { workerId: worker, wanted: 10, clientConcurrency: 1, tokenPrefix: 'y.', acks: [pairsOf(first.outcome)[0]] });
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
      keys.workers, keys.heartbeats, keys.groups, group.processing(worker), group.workers, group.heartbeats, group.weights, group.rates, group.buckets,
      group.throttled, group.counted, group.inflight, group.parked, group.counters, group.sequence, group.prioritized, group.pendingCount,
      group.pending('b'), group.pending('c'), group.faults, `${group.pending('d')}:quarantined:1`,
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
    const first = await gateway.claim(keys, { ...request, wanted: 1, tokenPrefix: 'p0.' });
    expect([ids(first.outcome), first.drained]).toEqual([['1'], false]); // a stayed on the ring with task 2
    const some = await gateway.claim(keys, { ...request, wanted: 1, tokenPrefix: 'p1.' });
    expect([ids(some.outcome), some.drained]).toEqual([['3'], false]); // b left the ring; a still waits with task 2
    const last = await gateway.claim(keys, { ...request, wanted: 1, tokenPrefix: 'p2.' });
    expect([ids(last.outcome), last.drained]).toEqual([['2'], true]); // took exactly the last one
    const none = await gateway.claim(keys, { ...request, wanted: 5, tokenPrefix: 'p3.' });
    expect([ids(none.outcome), none.drained]).toEqual([[], true]);
    // Only acknowledging, or refused, it tells nothing about the queue.
    await enqueue(['c', ['4']]);
    const acked = await gateway.claim(keys, { ...request, wanted: 0, tokenPrefix: 'p4.', acks: pairsOf(last.outcome).slice(0, 1) });
    expect(acked.drained).toBe(false);
    await redis.set(keys.paused, '1');
    expect((await gateway.claim(keys, { ...request, wanted: 5, tokenPrefix: 'p5.' })).drained).toBe(false);
  });

  it('takes a lone client\'s tasks in one pop, as a visit per task would: in order, tokens rising, the ring and the pending count kept right', async () => {
    await enqueue(['a', ['1', '2', '3', '4', '5']]);
    const request = { workerId: worker, clientConcurrency: 0, acks: [] };
    const some = await gateway.claim(keys, { ...request, wanted: 3, tokenPrefix: 'p0.' });
    expect([ids(some.outcome), some.drained]).toEqual([['1', '2', '3'], false]);
    const tokens = pairsOf(some.outcome).filter((_, i) => i % 2 === 0);
    expect([...tokens].sort()).toEqual(tokens);
    expect(await redis.hlen(keys.processing(worker))).toBe(3);
    expect(await redis.lrange(keys.ring, 0, -1)).toEqual(['a']);
    expect(await redis.get(keys.pendingCount)).toBe('2');
    // More asked than it holds: the rest, the client leaves the ring, the queue is drained.
    const rest = await gateway.claim(keys, { ...request, wanted: 5, tokenPrefix: 'p1.' });
    expect([ids(rest.outcome), rest.drained]).toEqual([['4', '5'], true]);
    expect(await redis.lrange(keys.ring, 0, -1)).toEqual([]);
    expect(await redis.get(keys.pendingCount)).toBe('0');
  });

  it('drops a lone client left on the ring with nothing pending, and heals a lone client\'s list of the wrong type', async () => {
    await redis.rpush(keys.ring, 'a');
    const stale = await gateway.claim(keys, { workerId: worker, clientConcurrency: 0, acks: [], wanted: 4, tokenPrefix: 'p0.' });
    expect([ids(stale.outcome), stale.drained]).toEqual([[], true]);
    expect(await redis.lrange(keys.ring, 0, -1)).toEqual([]);
    await redis.set(keys.pending('b'), 'x');
    await redis.rpush(keys.ring, 'b');
    const broken = await gateway.claim(keys, { workerId: worker, clientConcurrency: 0, acks: [], wanted: 4, tokenPrefix: 'p1.' });
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
    const { lost, outcome } = await gateway.claim(keys, { workerId: worker, wanted: 1, clientConcurrency: 0, tokenPrefix: 'again.', acks: [t1, t2] });
    expect(lost).toEqual([t2]);
    expect(ids(outcome)).toEqual(['3']);
    expect(Object.keys(await redis.hgetall(keys.processing(worker)))).toEqual([pairsOf(outcome)[0]]);
  });

  it('claims nothing from a paused queue but still acknowledges, and claims again once resumed', async () => {
    await enqueue(['a', ['1', '2']]);
    const [t1] = (await claim('a', 1)) as string[];
    await redis.set(keys.paused, '1');
    const { lost, outcome } = await gateway.claim(keys, { workerId: worker, wanted: 5, clientConcurrency: 0, tokenPrefix: 'again.', acks: [t1] });
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
    const { outcome, throttledUntil = 0 } = await gateway.claim(keys, { workerId: worker, wanted: 8, clientConcurrency: 0, tokenPrefix: 'rated.', acks: [] });
    // slow gets its one token, then is throttled; fast drains meanwhile.
    expect(ids(outcome)).toEqual(['s1', 'f1', 'f2', 'f3', 'f4']);
    const [seconds, micros] = await redis.time();
    const now = Number(seconds) * 1000 + Math.floor(Number(micros) / 1000);
    expect(throttledUntil - now).toBeGreaterThan(50);
    expect(throttledUntil - now).toBeLessThanOrEqual(100);
    expect(await redis.lrange(keys.ring, 0, -1)).toEqual([]);
    expect(Number(await redis.zscore(keys.throttled, 'slow'))).toBe(throttledUntil);
    // Before its token is due nothing is released; at the due time it is back on the ring.
    expect(await gateway.releaseThrottled(keys, throttledUntil - 1)).toEqual({ released: 0, nextDueAt: throttledUntil });
    expect(await gateway.releaseThrottled(keys, throttledUntil)).toEqual({ released: 1 });
    expect(await redis.lrange(keys.ring, 0, -1)).toEqual(['slow']);
  });

  it('ends a weighted visit early at the per-client cap, and parks the client', async () => {
    await enqueue(['a', ['a1', 'a2', 'a3']], ['b', ['b1', 'b2']]);
    await redis.hset(keys.weights, 'a', 3);
    expect(ids(await claimAs(redis, keys, worker, 3, [], 1))).toEqual(['a1', 'b1']);
    expect(await redis.smembers(keys.parked)).toEqual(expect.arrayContaining(['a', 'b']));
    expect(await redis.hlen(keys.credit)).toBe(0);
  });
});

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
    await enqueueWith([['a', '1'], ['a', '2', { dedupKey: 'k' }], ['a', '3']]);
    const tokens = ((await claim('a', 3)) as string[]).filter((_, i) => i % 2 === 0);
    const reply = JSON.stringify({ id: '3', response: 7 });
    const results = await gateway.acknowledge(keys, worker, [
      tokens[0], '1', '', '', '', 5_000,
      'not-a-held-token', 'x', '', '', '', 5_000,
      tokens[1], '2', 'k', '', '', 5_000,
      tokens[2], '3', '', `${prefix}:replies:x`, reply, 5_000,
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
    const results = await gateway.acknowledge(keys, worker, [token, '1', '', '', '', 5_000, token, '1', '', '', '', 5_000]);
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
    const results = await gateway.acknowledge(keys, worker, tokens.flatMap((token, i) => [token, String(i), '', '', '', 5_000]));
    expect(results.filter((held) => held)).toHaveLength(count);
    expect(await redis.exists(keys.processing(worker))).toBe(0);
    expect(await redis.hget(keys.counters, 'completed')).toBe(String(count));
  });

  it('changes nothing when the processing hash is not a hash', async () => {
    await enqueueWith([['a', '1', { dedupKey: 'k' }]]);
    const [token] = (await claim('a', 1)) as string[];
    await redis.del(keys.processing(worker));
    await redis.set(keys.processing(worker), 'x');
    await expect(gateway.acknowledge(keys, worker, [token, '1', 'k', `${prefix}:replies:x`, '{}', 5_000])).rejects.toThrow(/WRONGTYPE/);
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
    expect(await gateway.deadLetter(keys, worker, second, { record: JSON.stringify({ id: '2', reason: 'unsupported-version' }), cap: 5 })).toBe(true);
    expect(await redis.hgetall(keys.counters)).toEqual({ deadLettered: '2' });
  });
});

describe('requeueTasks', () => {
  async function requeue(countAttempt: 0 | 1, tokens: string[], clientId = 'a', priority = 0): Promise<number> {
    return gateway.requeue(keys, worker, countAttempt === 1, tokens.map((token) => ({ token, clientId, priority })));
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
    const [first, second] = await Promise.all([
      requeue(1, [token]),
      requeue(1, [token]),
    ]);
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
    await enqueueWith([['a', '1'], ['a', '2', { priority: 2 }], ['b', '3']]);
    await redis.lrem(keys.ring, 0, 'a'); // a hand edit: a's tasks are stranded
    await redis.set(keys.pendingCount, 1);
    expect(await gateway.rejoinClient(keys, 'b')).toBe(0);
    expect(await gateway.rejoinClient(keys, 'a')).toBe(2);
    expect(await gateway.rejoinClient(keys, 'a')).toBe(0);
    expect(await redis.lrange(keys.ring, 0, -1)).toEqual(['b', 'a']);
    expect(await redis.get(keys.pendingCount)).toBe('3');
    expect(await redis.hget(keys.faults, keys.pending('a'))).toMatch(/had 2 pending task\(s\) but its client was off the ring; put back/);
    await redis.sadd(keys.parked, 'c');
    await enqueueWith([['c', '4']]);
    await redis.lrem(keys.ring, 0, 'c');
    await redis.sadd(keys.parked, 'c');
    expect(await gateway.rejoinClient(keys, 'c')).toBe(0); // parked at its cap: in reach once a slot frees
  });
});

describe('heartbeatWorker', () => {
  it('records the lease expiry on the Redis clock', async () => {
    const [seconds] = await redis.time();
    const { now } = await gateway.heartbeat(keys, 'w2', 5_000);
    expect(Math.abs(now - Number(seconds) * 1000)).toBeLessThan(2_000);
    expect(Number(await redis.zscore(keys.workers, 'w2'))).toBe(now + 5_000);
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
    const move = () => gateway.deadLetterDelayed(keys, garbage, JSON.stringify({ reason: 'malformed', raw: garbage }), 5);
    const moved = await Promise.all([move(), move()]);
    expect(moved.filter(Boolean)).toHaveLength(1);
    expect(await redis.lrange(keys.deadLetters, 0, -1)).toEqual([JSON.stringify({ reason: 'malformed', raw: garbage })]);
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

describe('priorities', () => {
  it('claims higher priorities first, equal priorities in enqueue order, plain tasks last', async () => {
    await enqueueWith([
      ['a', 'plain-1'],
      ['a', 'low-1', { priority: 1 }],
      ['a', 'high-1', { priority: 10 }],
      ['a', 'low-2', { priority: 1 }],
      ['a', 'high-2', { priority: 10 }],
      ['a', 'plain-2'],
    ]);
    expect(await redis.lrange(keys.ring, 0, -1)).toEqual(['a']);
    expect(ids(await claim('a', 3))).toEqual(['high-1', 'high-2', 'low-1']);
    expect(await redis.lrange(keys.ring, 0, -1)).toEqual(['a']);
    expect(ids(await claim('a', 10))).toEqual(['low-2', 'plain-1', 'plain-2']);
    expect(await redis.llen(keys.ring)).toBe(0);
  });

  it('puts a client with only prioritized tasks on the ring once, and a requeued one at the head of its priority', async () => {
    await enqueueWith([['a', 'p-1', { priority: 5 }], ['a', 'p-2', { priority: 5 }]]);
    expect(await redis.lrange(keys.ring, 0, -1)).toEqual(['a']);
    const reply = (await claim('a', 2)) as string[];
    expect(await redis.llen(keys.ring)).toBe(0);
    await enqueueWith([['a', 'p-3', { priority: 5 }]]);
    expect(await gateway.requeue(keys, worker, false, [reply[2], reply[0]].map((token) => ({ token, clientId: 'a', priority: 5 })))).toBe(2);
    expect(await redis.lrange(keys.ring, 0, -1)).toEqual(['a']);
    expect(ids(await claim('a', 3))).toEqual(['p-1', 'p-2', 'p-3']);
  });
});

describe('delays', () => {
  it('puts a delayed task in the delayed set due after its delay (Redis clock), not on the ring', async () => {
    const [seconds] = await redis.time();
    expect(await enqueueWith([['a', 'later', { delayMs: 5_000 }]])).toEqual([0]);
    expect(await redis.llen(keys.ring)).toBe(0);
    expect(await redis.llen(keys.pending('a'))).toBe(0);
    const [raw, score] = await redis.zrange(keys.delayed, '0', '-1', 'WITHSCORES');
    expect(decodeEntry(raw)).toMatchObject({ ok: true, entry: { envelope: { id: 'later' } } });
    expect(Number(score) - Number(seconds) * 1000).toBeGreaterThanOrEqual(4_000);
  });
});

describe('deduplication', () => {
  it('refuses a second task with a live key (naming the holder), and frees the key when the holder is acknowledged', async () => {
    expect(await enqueueWith([['a', 'first', { dedupKey: 'k' }], ['a', 'second', { dedupKey: 'k' }]])).toEqual([0, 'first']);
    expect(await redis.llen(keys.pending('a'))).toBe(1);
    expect(await redis.pttl(keys.dedup('k'))).toBeGreaterThan(0);
    const [token] = (await claim('a', 1)) as string[];
    expect(await ack(token, 'first', { dedupKey: 'k' })).toBe(true);
    expect(await redis.exists(keys.dedup('k'))).toBe(0);
    expect(await enqueueWith([['a', 'third', { dedupKey: 'k' }]])).toEqual([0]);
  });

  it('frees the key when the holder is dead-lettered, but never a key another task holds', async () => {
    await enqueueWith([['a', 'first', { dedupKey: 'k' }]]);
    const [token] = (await claim('a', 1)) as string[];
    await redis.set(keys.dedup('k'), 'someone-else');
    expect(await gateway.deadLetter(keys, worker, token, { record: '{}', cap: 5, taskId: 'first', deduplicationKey: 'k' })).toBe(true);
    expect(await redis.get(keys.dedup('k'))).toBe('someone-else');
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
    return raws.map((raw) => (decodeEntry(raw) as { ok: true; entry: { envelope: { id: string } } }).entry.envelope.id).sort();
  }

  it('quarantines a client pending list of the wrong type and claims every other client\'s tasks', async () => {
    await enqueue(['a', ['a1', 'a2']], ['c', ['c1', 'c2']]);
    // A stray SET on client b's list, with b on the ring (as a crashed tool or a typo would leave it).
    await redis.set(keys.pending('b'), 'x');
    await redis.rpush(keys.ring, 'b');
    const claimed = ids(await claim('a', 10));
    expect(claimed.sort()).toEqual(['a1', 'a2', 'c1', 'c2']);
    // Nothing was popped and lost: each claimed task is held, b's bad value is kept aside and recorded.
    expect(await everyTaskId()).toEqual(['a1', 'a2', 'c1', 'c2']);
    expect(await redis.get(`${keys.pending('b')}:quarantined:1`)).toBe('x');
    expect(await redis.hget(keys.faults, keys.pending('b'))).toMatch(/held a string, not a list; renamed to .*:quarantined:1$/);
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
    await enqueueWith([['a', 'p1', { priority: 5 }], ['a', 'n1']]);
    await redis.set(keys.prioritized, 'garbage');
    expect(ids(await claim('a', 10))).toEqual(['p1', 'n1']);
    expect(await redis.hget(keys.faults, keys.prioritized)).toMatch(/not an integer counter/);
  });

  it('refuses a claim against a broken queue-level key before popping anything, naming the key', async () => {
    await enqueue(['a', ['a1', 'a2']]);
    await redis.set(keys.inflight, 'x');
    await expect(claimAs(redis, keys, worker, 5, [], 1)).rejects.toThrow(`key ${keys.inflight} holds a string, not a hash; nothing was changed`);
    expect(await everyTaskId()).toEqual(['a1', 'a2']);
    expect(await redis.lrange(keys.ring, 0, -1)).toEqual(['a']);
  });

  it('keeps a task held when a settle script meets a broken key (retry, dead letter), and settles it once healed', async () => {
    await enqueue(['a', ['a1', 'a2']]);
    const [t1, , t2] = (await claim('a', 2)) as string[];
    await redis.set(keys.delayed, 'x');
    await expect(gateway.retry(keys, worker, t1, 10)).rejects.toThrow(/holds a string, not a zset/);
    await redis.set(keys.deadLetters, 'x');
    await expect(
      gateway.deadLetter(keys, worker, t2, { record: '{}', cap: 5 }),
    ).rejects.toThrow(/holds a string, not a list/);
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
    expect(await enqueueWith([['a', 'a1'], ['a', 'a2'], ['b', 'b1'], ['c', 'c1']])).toEqual([0, 0, 0, 0]);
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
    expect(await enqueueWith([['a', 'a1'], ['b', 'b1'], ['c', 'c1', { dedupKey: 'k' }]])).toEqual([0, 0, 0]);
    expect(await everyTaskId()).toEqual(['a1', 'b1', 'c1']);
    expect(await redis.get(keys.dedup('k'))).toBe('c1');
    expect(Object.keys(await redis.hgetall(keys.faults)).sort()).toEqual(['#quarantined', keys.dedup('k'), keys.pending('b')].sort());
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
    await expect(gateway.claim(keys, { workerId: worker, wanted: 36, clientConcurrency: 2, tokenPrefix: 'p.', acks: [] })).rejects.toThrow(
      `key ${keys.counted} holds a string, not a hash; nothing was changed`,
    );
    await redis.del(keys.counted);
    expect(await snapshotKeys(redis, prefix)).toEqual(before);
    const claimed = ids((await gateway.claim(keys, { workerId: worker, wanted: 100, clientConcurrency: 2, tokenPrefix: 'p.', acks: [] })).outcome);
    expect(claimed.sort()).toEqual(tasks.map(([, id]) => id).sort());
    expect(await redis.get(`${keys.processing(worker)}:quarantined:1`)).toBe('x');
    expect(await redis.hget(keys.faults, keys.processing(worker))).toMatch(/held a string, not a hash/);
  });
});

describe('claimTasks sent twice (ioredis resends a call whose reply a reconnection lost)', () => {
  it('claims other tasks under other tokens the second time, overwriting nothing', async () => {
    await enqueue(['a', ['1', '2', '3', '4']]);
    const call = async () => (await gateway.claim(keys, { workerId: worker, wanted: 2, clientConcurrency: 0, tokenPrefix: 'same-prefix.', acks: [] })).outcome;
    const first = await call();
    const second = await call();
    expect([...ids(first), ...ids(second)]).toEqual(['1', '2', '3', '4']);
    const held = await redis.hgetall(keys.processing(worker));
    expect(Object.keys(held)).toHaveLength(4);
  });
});

describe('the pending count (what stats and the dashboard read in O(1))', () => {
  /** What the clients' lists and priority sets really hold. */
  async function actual(clients: readonly string[]): Promise<number> {
    let total = 0;
    for (const clientId of clients) total += (await redis.llen(keys.pending(clientId))) + (await redis.zcard(keys.priority(clientId)));
    return total;
  }
  const counted = async () => Number(await redis.get(keys.pendingCount));

  it('follows every script that adds or takes pending tasks, priorities and delays included', async () => {
    const clients = ['a', 'b', 'c'];
    await enqueueWith([['a', '1'], ['a', '2'], ['b', '3', { priority: 5 }], ['c', '4', { delayMs: 60_000 }], ['c', '5']]);
    expect(await counted()).toBe(4);
    expect(await actual(clients)).toBe(4);

    const claimed = pairsOf(await claim('a', 3));
    expect(await counted()).toBe(1);
    expect(await actual(clients)).toBe(1);

    // Back to the head of their lists (a shutdown, a recovery).
    const held = [];
    for (let i = 0; i < claimed.length; i += 2) {
      const { entry: decoded } = decodeEntry(claimed[i + 1]) as { ok: true; entry: { envelope: { clientId: string; priority?: number } } };
      held.push({ token: claimed[i], clientId: decoded.envelope.clientId, priority: decoded.envelope.priority ?? 0 });
    }
    expect(await gateway.requeue(keys, worker, false, held.reverse())).toBe(3);
    expect(await counted()).toBe(4);

    // A delayed task promoted, a waiting one cancelled, a dead letter requeued.
    const [delayed] = await redis.zrange(keys.delayed, '0', '0');
    expect(await gateway.promote(keys, [{ entry: delayed, clientId: 'c', priority: 0 }])).toBe(1);
    expect(await counted()).toBe(5);
    const [waiting] = await redis.lrange(keys.pending('a'), -1, -1);
    expect(await gateway.cancel(keys, { clientId: 'a', entry: waiting, priority: 0, id: 'x' })).toBe(true);
    expect(await counted()).toBe(4);
    const record = JSON.stringify({ id: '9', clientId: 'b', payload: 1, reason: 'failed' });
    await redis.lpush(keys.deadLetters, record);
    expect(await gateway.requeueDeadLetters(keys, [{ raw: record, clientId: 'b', entry: entry('9', 'b'), priority: 0 }])).toBe(1);
    expect(await counted()).toBe(5);
    expect(await actual(clients)).toBe(5);

    pairsOf(await claim('a', 10));
    expect(await counted()).toBe(0);
    expect(await actual(clients)).toBe(0);
  });

  it('is set right by the first claim that finds no client waiting, whatever made it drift', async () => {
    await enqueue(['a', ['1', '2']]);
    await redis.set(keys.pendingCount, 40); // a hand edit, a quarantined list: the count no longer matches
    expect(ids(await claim('a', 10))).toEqual(['1', '2']);
    expect(await counted()).toBe(0);
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

import { describe, expect, it } from '@jest/globals';
import { decodeEntry } from '../../../lib/core/model/codec.js';
import { enqueueAnswer } from '../../../lib/core/redis/gateway.js';
import { pushEnqueueFields } from '../../../lib/core/redis/enqueue-fields.js';
import { claimAs, keysUnder, snapshotKeys, waitFor } from '../../support/redis.js';
import {
  redis,
  gateway,
  prefix,
  keys,
  worker,
  entry,
  enqueueWith,
  enqueue,
  claim,
  ack,
  ids,
  useLuaHarness,
} from '../harness.js';

useLuaHarness();

describe('enqueueTasks sent again (a call record makes a resend idempotent)', () => {
  /** One call: its record head (call id, mode), then a plain task, and a task holding a deduplication key another task took first. */
  function callArgs(mode: '1' | '2' | '3'): (string | number)[] {
    const args: (string | number)[] = [`{${mode}60.call-1`];
    pushEnqueueFields(args, {
      id: 'r1',
      clientId: 'a',
      entry: entry('r1'),
      priority: 0,
      delayMs: 0,
      deduplicationTtlMs: 60_000,
      awaitsReply: false,
    });
    pushEnqueueFields(args, {
      id: 'r2',
      clientId: 'a',
      entry: entry('r2'),
      priority: 0,
      delayMs: 0,
      deduplicationKey: 'held',
      deduplicationTtlMs: 60_000,
      awaitsReply: false,
    });
    return args;
  }

  it('answers a resend (mode 2) from the record of the first send, writing nothing', async () => {
    await redis.set(keys.dedup('held'), 'other');
    expect(await redis.enqueueTasks(keys.root, ...callArgs('1'))).toEqual([0, 'other']);
    const before = await snapshotKeys(redis, prefix);
    expect(await redis.enqueueTasks(keys.root, ...callArgs('2'))).toEqual([0, 'other']);
    expect(await snapshotKeys(redis, prefix)).toEqual(before);
    expect(await redis.llen(keys.pending('a'))).toBe(1);
    expect(Number(await redis.pttl(keys.call('call-1')))).toBeGreaterThan(50_000);
  });

  it('records an all-written call as its task count, and answers a resend of it with zeros', async () => {
    const args: (string | number)[] = ['{160.call-2'];
    for (const id of ['p1', 'p2', 'p3'])
      pushEnqueueFields(args, {
        id,
        clientId: 'a',
        entry: entry(id),
        priority: 0,
        delayMs: 0,
        deduplicationTtlMs: 60_000,
        awaitsReply: false,
      });
    expect(await redis.enqueueTasks(keys.root, ...args)).toEqual([0, 0, 0]);
    expect(await redis.get(keys.call('call-2'))).toBe('3');
    args[0] = '{260.call-2';
    expect(await redis.enqueueTasks(keys.root, ...args)).toEqual([0, 0, 0]);
    expect(await redis.llen(keys.pending('a'))).toBe(3);
  });

  it('runs a resend whose first send never ran (mode 2, no record) as a first send', async () => {
    expect(await redis.enqueueTasks(keys.root, ...callArgs('2'))).toEqual([0, 0]);
    expect(await redis.llen(keys.pending('a'))).toBe(2);
  });

  it('writes nothing for a resend after the deadline with no record (mode 3), and says so', async () => {
    const before = await snapshotKeys(redis, prefix);
    expect(await redis.enqueueTasks(keys.root, ...callArgs('3'))).toBe(-1);
    expect(() => enqueueAnswer(-1)).toThrow('found no record of an earlier send; it wrote nothing');
    expect(await snapshotKeys(redis, prefix)).toEqual(before);
  });

  it('answers a task whose deduplication key its own id holds as written, and writes it no second time (a resend with no record)', async () => {
    const args = (): (string | number)[] => {
      const list: (string | number)[] = [];
      pushEnqueueFields(list, {
        id: 'd1',
        clientId: 'a',
        entry: entry('d1'),
        priority: 0,
        delayMs: 0,
        deduplicationKey: 'k',
        deduplicationTtlMs: 60_000,
        awaitsReply: false,
      });
      return list;
    };
    expect(await redis.enqueueTasks(keys.root, ...args())).toEqual([0]);
    expect(await redis.enqueueTasks(keys.root, ...args())).toEqual([0]);
    expect(await redis.llen(keys.pending('a'))).toBe(1);
  });
});

describe('enqueueTasks numbered on its connection (modes 4 to 8: a mark per session, not a key per call)', () => {
  const SESSION = '~test1';
  /** A call numbered `n` with `lowest` the lowest unanswered, in `mode`: a plain task, then one with options. */
  function numbered(mode: string, n: number, lowest: number, ids = [`n${n}a`, `n${n}b`]): (string | number)[] {
    const args: (string | number)[] = [`{${mode}60.${SESSION}.${n.toString(36)}.${lowest.toString(36)}`];
    pushEnqueueFields(args, {
      id: ids[0],
      clientId: 'a',
      entry: entry(ids[0]),
      priority: 0,
      delayMs: 0,
      deduplicationTtlMs: 60_000,
      awaitsReply: false,
    });
    pushEnqueueFields(args, {
      id: ids[1],
      clientId: 'a',
      entry: entry(ids[1]),
      priority: 3,
      delayMs: 0,
      deduplicationTtlMs: 60_000,
      awaitsReply: false,
    });
    return args;
  }
  const mark = () => redis.get(keys.call(SESSION));
  const recordOf = (n: number, lowest: number) => keys.call(`${SESSION}.${n.toString(36)}.${lowest.toString(36)}`);

  it('moves the mark with no record of its own, gives the mark a TTL when it makes it, and answers a resend at or below it as written', async () => {
    expect(await redis.enqueueTasks(keys.root, ...numbered('4', 1, 1))).toEqual([0, 0]);
    expect(await mark()).toBe('1');
    // Made by a call that does not renew it (its XX write found none): still with a TTL, the record's and 2 s.
    expect(Number(await redis.pttl(keys.call(SESSION)))).toBeGreaterThan(60_000);
    expect(Number(await redis.pttl(keys.call(SESSION)))).toBeLessThanOrEqual(62_000);
    expect(await redis.exists(recordOf(1, 1))).toBe(0);
    expect(await redis.enqueueTasks(keys.root, ...numbered('4', 2, 2))).toEqual([0, 0]);
    expect(await mark()).toBe('2');
    const before = await snapshotKeys(redis, prefix);
    for (const mode of ['6', '7', '8']) {
      expect(await redis.enqueueTasks(keys.root, ...numbered(mode, 1, 1))).toEqual([0, 0]);
      expect(await redis.enqueueTasks(keys.root, ...numbered(mode, 2, 2))).toEqual([0, 0]);
    }
    expect(await snapshotKeys(redis, prefix)).toEqual(before);
    expect(await redis.llen(keys.pending('a'))).toBe(2);
  });

  it('keeps the TTL of the mark on a call that does not renew it, and renews it on one that does', async () => {
    await redis.enqueueTasks(keys.root, ...numbered('5', 1, 1));
    await redis.pexpire(keys.call(SESSION), 30_000);
    await redis.enqueueTasks(keys.root, ...numbered('4', 2, 2));
    expect(Number(await redis.pttl(keys.call(SESSION)))).toBeLessThanOrEqual(30_000);
    await redis.enqueueTasks(keys.root, ...numbered('5', 3, 3));
    expect(Number(await redis.pttl(keys.call(SESSION)))).toBeGreaterThan(60_000);
    expect(await mark()).toBe('3');
  });

  it('does not move the mark past a lower call still unanswered that did not run: that call, sent again, runs', async () => {
    // Call 1 was written before call 2 and is unanswered (say Redis refused it, and the reply was lost).
    expect(await redis.enqueueTasks(keys.root, ...numbered('4', 2, 1))).toEqual([0, 0]);
    expect(await mark()).toBeNull();
    expect(await redis.get(recordOf(2, 1))).toBe('2'); // answered from its own record instead
    expect(await redis.enqueueTasks(keys.root, ...numbered('6', 1, 1))).toEqual([0, 0]);
    expect(await redis.llen(keys.pending('a'))).toBe(2); // n1a and n2a, n1a written once it ran
    expect(await mark()).toBe('1');
    // Call 2 sent again: its record says it ran.
    const before = await snapshotKeys(redis, prefix);
    expect(await redis.enqueueTasks(keys.root, ...numbered('6', 2, 1))).toEqual([0, 0]);
    expect(await snapshotKeys(redis, prefix)).toEqual(before);
  });

  it('moves the mark over calls that ran in order', async () => {
    await redis.enqueueTasks(keys.root, ...numbered('5', 1, 1));
    expect(await redis.enqueueTasks(keys.root, ...numbered('4', 2, 1))).toEqual([0, 0]);
    expect(await mark()).toBe('2');
    expect(await redis.exists(recordOf(2, 1))).toBe(0);
    expect(await redis.enqueueTasks(keys.root, ...numbered('4', 3, 2))).toEqual([0, 0]);
    expect(await mark()).toBe('3');
  });

  it('records an answer that is not every task written, and answers a resend of it from that record', async () => {
    await redis.set(keys.dedup('held'), 'other');
    const args = numbered('4', 1, 1);
    pushEnqueueFields(args, {
      id: 'd',
      clientId: 'a',
      entry: entry('d'),
      priority: 0,
      delayMs: 0,
      deduplicationKey: 'held',
      deduplicationTtlMs: 60_000,
      awaitsReply: false,
    });
    expect(await redis.enqueueTasks(keys.root, ...args)).toEqual([0, 0, 'other']);
    expect(await mark()).toBe('1');
    args[0] = String(args[0]).replace('{4', '{6');
    expect(await redis.enqueueTasks(keys.root, ...args)).toEqual([0, 0, 'other']);
    expect(await redis.llen(keys.pending('a'))).toBe(1);
  });

  it('writes nothing for a call after its deadline that did not run (mode 8), and says so', async () => {
    const before = await snapshotKeys(redis, prefix);
    expect(await redis.enqueueTasks(keys.root, ...numbered('8', 1, 1))).toBe(-1);
    expect(await snapshotKeys(redis, prefix)).toEqual(before);
  });

  it('writes its tasks when the mark is a key of another type, takes the key, and gives it a TTL at the renewal', async () => {
    await redis.hset(keys.call(SESSION), 'x', '1');
    expect(await redis.enqueueTasks(keys.root, ...numbered('4', 1, 1))).toEqual([0, 0]);
    expect(await mark()).toBe('1');
    expect(await redis.enqueueTasks(keys.root, ...numbered('6', 1, 1))).toEqual([0, 0]);
    expect(await redis.llen(keys.pending('a'))).toBe(1);
    expect(await redis.enqueueTasks(keys.root, ...numbered('5', 2, 2))).toEqual([0, 0]);
    expect(Number(await redis.pttl(keys.call(SESSION)))).toBeGreaterThan(60_000);
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
      const results = await enqueueWith([
        ['a', '1'],
        ['b', '2', { priority: 3 }],
        ['c', '3', { delayMs: 60_000 }],
        ['d', '4', { dedupKey: 'k' }],
        ['d', '5', { dedupKey: 'k' }],
      ]);
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
      const expected = [
        keys.ring,
        keys.bell,
        keys.pending('a'),
        keys.pending('d'),
        keys.priority('b'),
        keys.prioritized,
        keys.pendingCount,
        keys.sequence,
        keys.delayed,
        keys.dedup('k'),
      ];
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
    await enqueueWith([
      ['a', '1'],
      ['b', '2'],
      ['c', '3', { priority: 2 }],
      ['d', '4'],
      ['e', '5', { delayMs: 60_000 }],
      ['f', '6'],
    ]);
    expect(await redis.lrange(keys.ring, 0, -1)).toEqual(['a', 'b', 'c', 'd', 'f']);
    expect(await redis.get(keys.pendingCount)).toBe('5');
    expect(ids(await claim('a', 10))).toEqual(['1', '2', '3', '4', '6']);
  });
});

describe('consumer groups (enqueueTasks fan-out)', () => {
  it('copies each task into every registered group, named as keys.ts names them, in one call', async () => {
    await redis.sadd(keys.groups, 'billing', 'email');
    expect(
      await enqueueWith([
        ['a', '1'],
        ['a', '2', { priority: 5 }],
        ['b', '3', { delayMs: 60_000 }],
      ]),
    ).toEqual([0, 0, 0]);
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
    await enqueueWith([
      ['a', 'p-1', { priority: 5 }],
      ['a', 'p-2', { priority: 5 }],
    ]);
    expect(await redis.lrange(keys.ring, 0, -1)).toEqual(['a']);
    const reply = (await claim('a', 2)) as string[];
    expect(await redis.llen(keys.ring)).toBe(0);
    await enqueueWith([['a', 'p-3', { priority: 5 }]]);
    expect(
      await gateway.requeue(
        keys,
        worker,
        false,
        [reply[2], reply[0]].map((token) => ({ token, clientId: 'a', priority: 5 })),
      ),
    ).toBe(2);
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
    expect(
      await enqueueWith([
        ['a', 'first', { dedupKey: 'k' }],
        ['a', 'second', { dedupKey: 'k' }],
      ]),
    ).toEqual([0, 'first']);
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
    expect(
      await gateway.deadLetter(keys, worker, token, { record: '{}', cap: 5, taskId: 'first', deduplicationKey: 'k' }),
    ).toBe(true);
    expect(await redis.get(keys.dedup('k'))).toBe('someone-else');
  });
});

describe('enqueueTasks and out-of-line payloads (include/body.lua)', () => {
  /** A task whose entry names body `bodyId` (its payload stored beside it), with an optional deduplication key. */
  function bodied(id: string, bodyId: string, dedupKey?: string): (string | number)[] {
    const args: (string | number)[] = [];
    const head = entry(id).replace(/,"payload":.*}$/, '');
    pushEnqueueFields(args, {
      id,
      clientId: 'a',
      entry: `${head},"body":"${bodyId}"}`,
      priority: 0,
      delayMs: 0,
      deduplicationKey: dedupKey,
      deduplicationTtlMs: 60_000,
      awaitsReply: false,
      body: { id: bodyId, json: '"unused here"' },
    });
    return args;
  }

  it('keeps the body of a task it writes (its TTL removed), and copies it to each consumer group', async () => {
    await redis.set(keys.rootBody('b1'), '{"big":1}', 'PX', 60_000);
    expect(await redis.enqueueTasks(keys.root, ...bodied('t1', 'b1'))).toEqual([0]);
    expect(await redis.pttl(keys.rootBody('b1'))).toBe(-1);
    expect(await redis.lrange(keys.pending('a'), 0, -1)).toEqual([expect.stringMatching(/,"body":"b1"}$/)]);

    await redis.sadd(keys.groups, 'billing', 'audit');
    await redis.set(keys.rootBody('b2'), '{"big":2}', 'PX', 60_000);
    expect(await redis.enqueueTasks(keys.root, ...bodied('t2', 'b2'))).toEqual([0]);
    for (const group of ['billing', 'audit']) {
      expect(await redis.get(keys.forGroup(group).body('b2'))).toBe('{"big":2}');
      expect(await redis.pttl(keys.forGroup(group).body('b2'))).toBe(-1);
    }
    // No group reads the root's copy (`default` is not registered): it is gone.
    expect(await redis.exists(keys.rootBody('b2'))).toBe(0);
  });

  it('deletes the body of a duplicate it refuses, and writes nothing of a task whose body is gone', async () => {
    await redis.set(keys.dedup('held'), 'other');
    await redis.set(keys.rootBody('b3'), '{"big":3}', 'PX', 60_000);
    expect(await redis.enqueueTasks(keys.root, ...bodied('t3', 'b3', 'held'))).toEqual(['other']);
    expect(await redis.exists(keys.rootBody('b3'))).toBe(0);

    const before = await snapshotKeys(redis, prefix);
    expect(await redis.enqueueTasks(keys.root, ...bodied('t4', 'never-stored', 'free'))).toEqual(['\x03']);
    expect(await snapshotKeys(redis, prefix)).toEqual(before);
  });
});

import { afterAll, afterEach, describe, expect, it } from '@jest/globals';
import { Controller } from '@nestjs/common';
import { Ctx, EventPattern, Payload } from '@nestjs/microservices';
import {
  InvalidTaskError,
  RedisTaskAdmin,
  RedisTaskClient,
  RedisTaskContext,
  RedisTaskRecordBuilder,
  TaskCancelledError,
  type BatchSummary,
} from '../../lib/index.js';
import { PrefixKeys } from '../../lib/core/redis/keys.js';
import { TaskStore } from '../../lib/core/redis/store.js';
import { DECIDED_ENQUEUE_MS, SETTLED_GUARD_MS } from '../../lib/core/redis/call-record.js';
import { callbackGuard } from '../../lib/core/model/batch.js';
import type { BatchFireAnswer } from '../../lib/core/redis/batch-gateway.js';
import { enqueueCallbacks } from '../../lib/core/batches/batch-callbacks.js';
import { startProducer, startWorker } from '../support/nest.js';
import { deleteKeys, keysUnder, openRedis, testPrefix, waitFor } from '../support/redis.js';

const redis = openRedis();
const started: { close(): Promise<unknown> }[] = [];
let prefix = '';

/** What the callback handlers received, and how often each task ran. */
let summaries: { pattern: string; summary: BatchSummary; id: string }[] = [];
const ran = new Map<string, number>();
/** Why each image.slow run was aborted. */
const aborted = new Map<string, unknown>();
/** Failing images that run fine from now on. */
const fixed = new Set<string>();

@Controller()
class Album {
  @EventPattern<string>('image.resize')
  resize(@Payload() image: { name: string; fail?: boolean }): void {
    ran.set(image.name, (ran.get(image.name) ?? 0) + 1);
    if (image.fail && !fixed.has(image.name)) throw new Error(`cannot resize ${image.name}`);
  }

  @EventPattern<string>('image.thumbnail')
  thumbnail(@Payload() image: { name: string }): void {
    ran.set(image.name, (ran.get(image.name) ?? 0) + 1);
  }

  /** Runs until its signal aborts, recording why. */
  @EventPattern<string>('image.slow')
  async slow(@Payload() image: { name: string }, @Ctx() ctx: RedisTaskContext): Promise<void> {
    ran.set(image.name, (ran.get(image.name) ?? 0) + 1);
    await new Promise<void>((resolve) => ctx.signal.addEventListener('abort', () => resolve(), { once: true }));
    aborted.set(image.name, ctx.signal.reason);
  }

  @EventPattern<string>('album.publish')
  publish(@Payload() summary: BatchSummary, @Ctx() ctx: RedisTaskContext): void {
    summaries.push({ pattern: 'album.publish', summary, id: ctx.getTaskId() });
  }

  @EventPattern<string>('album.celebrate')
  celebrate(@Payload() summary: BatchSummary, @Ctx() ctx: RedisTaskContext): void {
    summaries.push({ pattern: 'album.celebrate', summary, id: ctx.getTaskId() });
  }
}

afterEach(async () => {
  await Promise.all(started.splice(0).map((app) => app.close()));
  await deleteKeys(redis, prefix);
  summaries = [];
  ran.clear();
  fixed.clear();
  aborted.clear();
});

afterAll(async () => {
  await redis.quit();
});

async function producer(): Promise<{ client: RedisTaskClient; admin: RedisTaskAdmin }> {
  const { client, module } = await startProducer(prefix);
  started.push(module);
  return { client, admin: new RedisTaskAdmin(client) };
}

async function worker(options: Parameters<typeof startWorker>[2] = {}) {
  const app = await startWorker(prefix, [Album], {
    heartbeatIntervalMs: 100,
    reaperIntervalMs: 50,
    maxAttempts: 1,
    ...options,
  });
  started.push(app.app);
  return app;
}

const images = (from: number, count: number, fail: (n: number) => boolean = () => false) =>
  Array.from({ length: count }, (_, i) => ({ name: `img${from + i}`, ...(fail(from + i) ? { fail: true } : {}) }));

describe('batches: fan-out, then a callback exactly once', () => {
  it('enqueues onComplete once every task of the sealed batch settled, across two patterns, with the summary', async () => {
    prefix = testPrefix('batch-basic');
    const { client, admin } = await producer();
    await worker();
    const batch = client.batch({ id: 'album-1', onComplete: { pattern: 'album.publish', payload: { album: 7 } } });
    await batch.add(
      'image.resize',
      images(0, 30, (n) => n % 10 === 3),
    );
    await batch.add('image.thumbnail', images(100, 10));
    await batch.seal();
    await waitFor(() => summaries.length === 1, 'the callback');
    const [{ summary, id }] = summaries;
    expect(id).toBe('batch.album-1.complete');
    expect(summary).toMatchObject({
      batchId: 'album-1',
      total: 40,
      succeeded: 37,
      failed: 3,
      cancelled: 0,
      payload: { album: 7 },
    });
    expect([...summary.failedIds].sort()).toHaveLength(3);
    expect(ran.size).toBe(40);
    expect(await admin.getBatch('album-1')).toMatchObject({
      state: 'sealed',
      total: 40,
      pending: 0,
      succeeded: 37,
      failed: 3,
      callback: 'enqueued',
      callbackIds: ['batch.album-1.complete'],
    });
    // The events were folded and dropped; nothing fires again.
    const keys = new PrefixKeys(prefix);
    await waitFor(async () => (await redis.llen(keys.queue('image.resize').batchEvents)) === 0, 'events dropped');
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(summaries).toHaveLength(1);
  });

  it('refuses an id whose sealed batch still lives with BatchIdInUseError saying until when; once its keys expired, the id makes a new batch that calls back once', async () => {
    prefix = testPrefix('batch-reuse');
    const { client, admin } = await producer();
    await worker();
    const open = () => client.batch({ id: 'album-9', onComplete: { pattern: 'album.publish' }, keepMs: 1_500 });
    const first = open();
    await first.add('image.resize', images(0, 2));
    await first.seal();
    await waitFor(() => summaries.length === 1, 'the first callback');
    // Its keys live 1.5 s after the callback settled: the id is in use, and the error says until when.
    await waitFor(async () => {
      const ttl = await redis.pttl(new PrefixKeys(prefix).batch('album-9').record);
      return ttl > 0 && ttl <= 1_500;
    }, 'the countdown from the callback settled');
    const refused = await open()
      .add('image.resize', images(10, 1))
      .catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(InvalidTaskError);
    expect(refused).toMatchObject({ name: 'BatchIdInUseError', code: 'BATCH_ID_IN_USE', batchId: 'album-9' });
    const until = (refused as { until?: Date }).until;
    expect(until).toBeInstanceOf(Date);
    expect((until as Date).getTime()).toBeGreaterThan(Date.now());
    expect((until as Date).getTime()).toBeLessThan(Date.now() + 2_000);
    await waitFor(async () => (await admin.getBatch('album-9')).state === 'unknown', 'the first batch to expire');
    const second = open();
    await second.add('image.resize', images(20, 3));
    await second.seal();
    await waitFor(() => summaries.length === 2, 'the second callback');
    expect(summaries[1].summary).toMatchObject({ batchId: 'album-9', total: 3, succeeded: 3 });
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(summaries).toHaveLength(2);
  });

  it('fires onSuccess as well when every task succeeded, and not when one failed', async () => {
    prefix = testPrefix('batch-success');
    const { client } = await producer();
    await worker();
    const callbacks = { onComplete: { pattern: 'album.publish' }, onSuccess: { pattern: 'album.celebrate' } };
    await client.emitBatch('image.thumbnail', images(0, 20), { batch: { id: 'all-good', ...callbacks } });
    await client.emitBatch(
      'image.resize',
      images(50, 5, (n) => n === 52),
      { batch: { id: 'one-bad', ...callbacks } },
    );
    await waitFor(() => summaries.length === 3, 'three callbacks');
    const byBatch = (batchId: string) =>
      summaries
        .filter((entry) => entry.summary.batchId === batchId)
        .map((entry) => entry.pattern)
        .sort();
    expect(byBatch('all-good')).toEqual(['album.celebrate', 'album.publish']);
    expect(byBatch('one-bad')).toEqual(['album.publish']);
  });

  it('a batch whose tasks all fail ends with its callback, the summary saying so', async () => {
    prefix = testPrefix('batch-all-fail');
    const { client } = await producer();
    await worker();
    await client.emitBatch(
      'image.resize',
      images(0, 12, () => true),
      {
        batch: { id: 'doomed', onComplete: { pattern: 'album.publish' } },
      },
    );
    await waitFor(() => summaries.length === 1, 'the callback');
    expect(summaries[0].summary).toMatchObject({ total: 12, succeeded: 0, failed: 12 });
    expect(summaries[0].summary.failedIds).toHaveLength(12);
  });

  it('waits for a task requeued from dead letters before it fired; a task requeued after it fired does not fire it again', async () => {
    prefix = testPrefix('batch-requeue');
    const { client, admin } = await producer();
    await worker();
    const batch = client.batch({ id: 'b1', onComplete: { pattern: 'album.publish' } });
    await batch.add(
      'image.resize',
      images(0, 3, (n) => n === 1),
    );
    await waitFor(async () => (await admin.getBatch('b1')).failed === 1, 'the failure counted');
    // Fixed, and requeued from dead letters before the seal: the batch waits for it again.
    fixed.add('img1');
    expect((await admin.requeueDeadLetters('image.resize', 'all')).requeued).toBe(1);
    await waitFor(async () => (await admin.getBatch('b1')).succeeded === 3, 'the requeued task counted');
    expect(await admin.getBatch('b1')).toMatchObject({ failed: 0, pending: 0 });
    await batch.seal();
    await waitFor(() => summaries.length === 1, 'the callback');
    expect(summaries[0].summary).toMatchObject({ total: 3, succeeded: 3, failed: 0 });
    // A batch that fired with a failure: its task requeued after it runs, and is counted, but fires nothing.
    await client.emitBatch(
      'image.resize',
      images(20, 2, (n) => n === 20),
      {
        batch: { id: 'b2', onComplete: { pattern: 'album.publish' } },
      },
    );
    await waitFor(() => summaries.length === 2, 'the second callback');
    expect(summaries[1].summary).toMatchObject({ batchId: 'b2', failed: 1, failedIds: [expect.any(String)] });
    fixed.add('img20');
    expect((await admin.requeueDeadLetters('image.resize', 'all')).requeued).toBe(1);
    await waitFor(async () => (await admin.getBatch('b2')).succeeded === 2, 'the rerun counted');
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(summaries).toHaveLength(2);
  });

  it('counts only tasks added before the seal; refuses adds after it, and a task of a batch with what it cannot have', async () => {
    prefix = testPrefix('batch-refused');
    const { client } = await producer();
    const batch = client.batch({ id: 'closed', onComplete: { pattern: 'album.publish' } });
    await batch.add('image.resize', images(0, 2));
    await batch.seal();
    await expect(batch.add('image.resize', images(5, 1))).rejects.toThrow(/is sealed/);
    const other = client.batch({ id: 'strict', onComplete: { pattern: 'album.publish' } });
    await expect(
      other.add('image.resize', [new RedisTaskRecordBuilder({ name: 'x' }).setDeduplicationKey('d').build()]),
    ).rejects.toThrow(InvalidTaskError);
    await expect(
      other.add('image.resize', [new RedisTaskRecordBuilder({ name: 'x' }).setCoalesceKey('k').build()]),
    ).rejects.toThrow(/coalescing key/);
    // Nothing of the refused items is counted: the batch completes with what was written.
    await other.add('image.resize', images(10, 2));
    await other.seal();
    await worker();
    await waitFor(() => summaries.length === 2, 'both callbacks');
    expect(summaries.map((entry) => entry.summary.total).sort()).toEqual([2, 2]);
    expect(() => client.batch({ onComplete: { pattern: '' } })).toThrow(InvalidTaskError);
    expect(() => client.batch({ id: 'has space', onComplete: { pattern: 'x' } })).toThrow(/id/);
  });

  it('cancelBatch removes the waiting tasks, stops the running ones through their fences, and fires the callback once with the cancelled count', async () => {
    prefix = testPrefix('batch-cancel');
    const { client, admin } = await producer();
    await worker({ concurrency: 4, idleSlots: 0 }); // all four slots for the one busy pattern
    const slow = Array.from({ length: 30 }, (_, i) => ({ name: `slow${i}` }));
    await client.emitBatch('image.slow', slow, { batch: { id: 'c1', onComplete: { pattern: 'album.publish' } } });
    await waitFor(() => ran.size === 4, 'four tasks running');
    expect(await admin.cancelBatch('c1')).toEqual({ cancelled: true, was: 'sealed', removed: 26, stopped: 4 });
    await waitFor(() => aborted.size === 4, 'the four running handlers to be told');
    for (const reason of aborted.values()) expect(reason).toBeInstanceOf(TaskCancelledError);
    await waitFor(() => summaries.length === 1, 'the callback');
    expect(summaries[0].summary).toMatchObject({ batchId: 'c1', total: 30, cancelled: 30, succeeded: 0, failed: 0 });
    expect(ran.size).toBe(4);
    expect(await admin.getBatch('c1')).toMatchObject({ state: 'cancelled', cancelled: 30, callback: 'enqueued' });
    await expect(
      client.batch({ id: 'c1', onComplete: { pattern: 'album.publish' } }).add('image.slow', [{ name: 'late' }]),
    ).rejects.toThrow(/cancelled/);
    expect(await admin.cancelBatch('no-such')).toEqual({ cancelled: false, state: 'unknown' });
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(summaries).toHaveLength(1);
  });

  it('fires at the seal when every task settled before it', async () => {
    prefix = testPrefix('batch-seal-late');
    const { client, admin } = await producer();
    await worker();
    const batch = client.batch({ id: 'late', onComplete: { pattern: 'album.publish' }, keepMs: 60_000 });
    await batch.add('image.thumbnail', images(0, 5));
    await waitFor(async () => (await admin.getBatch('late')).succeeded === 5, 'all five counted');
    expect(summaries).toHaveLength(0);
    await batch.seal();
    expect((await admin.getBatch('late')).callback).toBe('enqueued');
    await waitFor(() => summaries.length === 1, 'the callback');
    expect(await admin.getBatch('nope')).toMatchObject({ state: 'unknown', total: 0 });
    // Its record expires keepMs after its callback settled (a week while it has not).
    const record = new PrefixKeys(prefix).batch('late').record;
    await waitFor(async () => (await redis.pttl(record)) <= 60_000, 'the countdown to start at the callback settle');
    expect(await redis.pttl(record)).toBeGreaterThan(0);
    // Nothing is due any more: only the counters stay in the batches' shared slot, and the markers of its
    // counts (a count sent again counts nothing), which expire.
    const shared = (await keysUnder(redis, prefix)).filter((key) => key.includes('{%B}'));
    expect(shared.filter((key) => !key.includes(':counted:'))).toEqual([new PrefixKeys(prefix).batchCounters]);
    expect(shared.filter((key) => key.includes(':counted:')).sort()).toEqual([
      expect.stringMatching(/:counted:late:\d+:c$/),
      expect.stringMatching(/:counted:late:open:o$/),
    ]);
    for (const key of shared.filter((key) => key.includes(':counted:'))) {
      expect(await redis.pttl(key)).toBeGreaterThan(0);
    }
  });

  it('enqueues no second callback from a process that decided to fire before the first ran and settled, however late its enqueue comes', async () => {
    prefix = testPrefix('batch-stale-fire');
    const { client } = await producer();
    const app = await worker();
    const batch = client.batch({ id: 'stale', onComplete: { pattern: 'album.publish' } });
    await batch.add('image.thumbnail', images(0, 3));
    // What a reaper read from foldBatch the moment the batch fired, before any callback was on record.
    const keys = new PrefixKeys(prefix);
    await batch.seal();
    await waitFor(() => summaries.length === 1, 'the callback');
    const created = (await redis.hget(keys.batch('stale').record, 'created')) as string;
    const stale: BatchFireAnswer = {
      kind: 'fire',
      asked: Date.now(),
      complete: { pattern: 'album.publish' },
      total: 3,
      succeeded: 3,
      dead: 0,
      cancelled: 0,
      failedIds: [],
      created,
    };
    // The callback ran, and its settle was folded: nothing decides it any more.
    await waitFor(
      async () => (await redis.hexists(keys.batch('stale').record, 'settled/batch.stale.complete')) === 1,
      'the callback settle folded',
    );
    await app.app.close();
    started.splice(started.indexOf(app.app), 1);
    const store = TaskStore.recorded(redis, prefix);
    const shard = (await store.layouts.layout('album.publish')).shardOf('default');
    const guard = shard.dedup(callbackGuard('stale', created, 'complete'));
    await waitFor(async () => (await redis.pttl(guard)) <= SETTLED_GUARD_MS, 'the guard to be let go');
    // That reaper's enqueue comes now, within its deadline: the guard still refuses it.
    await enqueueCallbacks(store, 'stale', { ...stale, asked: Date.now() });
    expect(await redis.llen(shard.pending('default'))).toBe(0);
    // Once the guard is gone, an enqueue decided longer ago than its deadline writes nothing either.
    await redis.del(guard);
    await expect(
      enqueueCallbacks(store, 'stale', { ...stale, asked: Date.now() - DECIDED_ENQUEUE_MS - 1 }),
    ).rejects.toThrow(/after its deadline/);
    expect(await redis.llen(shard.pending('default'))).toBe(0);
    expect(summaries).toHaveLength(1);
  });
});

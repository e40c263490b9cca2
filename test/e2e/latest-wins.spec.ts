import { afterAll, afterEach, describe, expect, it } from '@jest/globals';
import { Controller } from '@nestjs/common';
import { Ctx, EventPattern, MessagePattern, Payload } from '@nestjs/microservices';
import { lastValueFrom } from 'rxjs';
import {
  InvalidTaskError,
  RedisTaskClient,
  RedisTaskContext,
  RedisTaskRecordBuilder,
  TaskReplacedError,
  type CoalesceOptions,
  type RedisTaskReceipt,
  type TaskOutcomeEvent,
} from '../../lib/index.js';
import { PrefixKeys } from '../../lib/core/redis/keys.js';
import { gatewayOf } from '../../lib/core/redis/gateway.js';
import { requeueProcessing } from '../../lib/core/redis/requeue.js';
import { startProducer, startWorker } from '../support/nest.js';
import { claimAs, deleteKeys, gate, keysUnder, openRedis, testPrefix, waitFor } from '../support/redis.js';

const redis = openRedis();
const started: { close(): Promise<unknown> }[] = [];
let prefix = '';

interface Avatar {
  readonly user: string;
  readonly seq: number;
}

/** Each run as its handler saw it, in start order. */
let runs: {
  pattern: string;
  payload: Avatar;
  id: string;
  at: number;
  aborted?: unknown;
  finished?: boolean;
  group?: string;
}[] = [];
/** Handlers of a key running now, and the most seen at once. */
let running = 0;
let mostRunning = 0;
let release = gate();
/** job.flaky fails the first run of each payload listed here. */
const failFirst = new Set<number>();

@Controller()
class Avatars {
  @EventPattern<string>('avatar.quick')
  quick(@Payload() payload: Avatar, @Ctx() ctx: RedisTaskContext): void {
    runs.push({
      pattern: 'avatar.quick',
      payload,
      id: ctx.getTaskId(),
      at: Date.now(),
      finished: true,
      group: ctx.getGroup(),
    });
  }

  /** Takes 20 ms, counting how many run at once. */
  @EventPattern<string>('avatar.slow')
  async slow(@Payload() payload: Avatar, @Ctx() ctx: RedisTaskContext): Promise<void> {
    const run = { pattern: 'avatar.slow', payload, id: ctx.getTaskId(), at: Date.now(), finished: false };
    runs.push(run);
    mostRunning = Math.max(mostRunning, ++running);
    await new Promise((resolve) => setTimeout(resolve, 20));
    running--;
    run.finished = true;
  }

  /** Runs until its signal aborts or the test releases it. */
  @MessagePattern('avatar.held')
  async held(@Payload() payload: Avatar, @Ctx() ctx: RedisTaskContext): Promise<number> {
    const run: (typeof runs)[number] = { pattern: 'avatar.held', payload, id: ctx.getTaskId(), at: Date.now() };
    runs.push(run);
    await Promise.race([
      release.promise,
      new Promise<void>((resolve) => ctx.signal.addEventListener('abort', () => resolve(), { once: true })),
    ]);
    if (ctx.signal.aborted) run.aborted = ctx.signal.reason;
    run.finished = true;
    return payload.seq;
  }

  @MessagePattern('avatar.flaky')
  async flaky(@Payload() payload: Avatar, @Ctx() ctx: RedisTaskContext): Promise<number> {
    runs.push({ pattern: 'avatar.flaky', payload, id: ctx.getTaskId(), at: Date.now() });
    if (failFirst.delete(payload.seq)) {
      await release.promise;
      throw new Error('the first run of this payload fails');
    }
    return payload.seq;
  }
}

afterEach(async () => {
  release.open();
  await Promise.all(started.splice(0).map((app) => app.close()));
  await deleteKeys(redis, prefix);
  runs = [];
  running = 0;
  mostRunning = 0;
  release = gate();
  failFirst.clear();
});

afterAll(async () => {
  await redis.quit();
});

async function producer(options: Parameters<typeof startProducer>[1] = {}): Promise<RedisTaskClient> {
  const { client, module } = await startProducer(prefix, options);
  started.push(module);
  return client;
}

async function worker(options: Parameters<typeof startWorker>[2] = {}) {
  const app = await startWorker(prefix, [Avatars], { heartbeatIntervalMs: 100, reaperIntervalMs: 50, ...options });
  started.push(app.app);
  return app;
}

function avatar(seq: number, options: CoalesceOptions = {}, user = 'u1') {
  return new RedisTaskRecordBuilder<Avatar>({ user, seq }).setCoalesceKey(`avatar:${user}`, options).build();
}

/** Emits the records one by one (each its own call, in order), returning the receipts. */
async function emitEach(client: RedisTaskClient, pattern: string, records: unknown[]): Promise<RedisTaskReceipt[]> {
  const receipts: RedisTaskReceipt[] = [];
  for (const record of records) receipts.push(await lastValueFrom(client.emit<RedisTaskReceipt>(pattern, record)));
  return receipts;
}

const seqs = (pattern: string) => runs.filter((run) => run.pattern === pattern).map((run) => run.payload.seq);

/** Nothing of the queue's coalescing keys is left once nothing waits or runs. */
async function noRecordsLeft(): Promise<void> {
  await waitFor(
    async () => (await keysUnder(redis, prefix)).every((key) => !key.includes(':coalesce:')),
    'the coalescing records to be deleted',
  );
}

describe('latest wins: setCoalesceKey', () => {
  it("keeps a waiting task's payload once (in its list), replaced or not; a replaced one's newest payload once more, to run it", async () => {
    prefix = testPrefix('latest-once');
    const client = await producer();
    const big = (seq: number) =>
      new RedisTaskRecordBuilder({ user: 'u1', seq, pad: 'x'.repeat(100_000) }).setCoalesceKey('avatar:u1').build();
    await emitEach(client, 'avatar.quick', [big(1)]);
    const keys = new PrefixKeys(prefix).queue('avatar.quick');
    // Every field counted (SAMPLES 0): sampled, one large field would be counted once per field.
    const bytes = async (key: string) => Number((await redis.call('MEMORY', 'USAGE', key, 'SAMPLES', '0')) ?? 0);
    expect(await bytes(keys.pending('default'))).toBeGreaterThan(100_000);
    expect(await bytes(keys.coalesce('avatar:u1'))).toBeLessThan(2_000);
    // A newer payload replaces it: the slot keeps its place (its list entry), the record holds the newest.
    await emitEach(client, 'avatar.quick', [big(2)]);
    expect(await bytes(keys.coalesce('avatar:u1'))).toBeLessThan(130_000);
    await worker();
    await waitFor(() => seqs('avatar.quick').includes(2), 'the newest payload to run');
    expect(seqs('avatar.quick')).toEqual([2]);
    await noRecordsLeft();
  });

  it('replace: 1,000 emits of one key in a burst run once, with the last payload; each receipt names the task it replaced', async () => {
    prefix = testPrefix('lw-replace');
    const client = await producer();
    const receipts = await emitEach(
      client,
      'avatar.quick',
      Array.from({ length: 1_000 }, (_, n) => avatar(n + 1)),
    );
    expect(receipts[0].replaced).toBeUndefined();
    for (let n = 1; n < receipts.length; n++) expect(receipts[n].replaced).toBe(receipts[n - 1].id);
    await worker();
    await waitFor(() => runs.length === 1, 'the one run');
    await noRecordsLeft();
    expect(seqs('avatar.quick')).toEqual([1_000]);
    expect(runs[0].id).toBe(receipts[999].id);
    const keys = new PrefixKeys(prefix).queue('avatar.quick');
    expect(await redis.hgetall(keys.counters)).toMatchObject({ replaced: '999', completed: '1' });
  });

  it('replace keeps the place in line of the task it replaced (others emitted after it run after it)', async () => {
    prefix = testPrefix('lw-place');
    const client = await producer();
    await emitEach(client, 'avatar.quick', [avatar(1)]);
    await emitEach(
      client,
      'avatar.quick',
      Array.from({ length: 5 }, (_, n) => avatar(100 + n, {}, `other${n}`)),
    );
    await emitEach(client, 'avatar.quick', [avatar(2)]);
    await worker({ concurrency: 1 });
    await waitFor(() => runs.length === 6, 'the six runs');
    expect(seqs('avatar.quick')).toEqual([2, 100, 101, 102, 103, 104]);
  });

  it('debounce: 1,000 emits in a burst run once, with the last payload, delayMs after the last', async () => {
    prefix = testPrefix('lw-debounce');
    const client = await producer();
    await worker();
    const options = { mode: 'debounce', delayMs: 300, maxWaitMs: 60_000 } as const;
    const records = Array.from({ length: 1_000 }, (_, n) => avatar(n + 1, options));
    const receipts = await client.emitBatch('avatar.quick', records);
    const lastEmit = Date.now();
    expect(receipts.filter((receipt) => receipt.replaced !== undefined)).toHaveLength(999);
    await waitFor(() => runs.length === 1, 'the one run');
    expect(runs[0].at - lastEmit).toBeGreaterThanOrEqual(250);
    expect(seqs('avatar.quick')).toEqual([1_000]);
    await noRecordsLeft();
    // Nothing more comes.
    await emitEach(client, 'avatar.quick', [new RedisTaskRecordBuilder({ user: 'x', seq: 0 }).build()]);
    await waitFor(() => runs.length === 2, 'a plain task after it');
    expect(seqs('avatar.quick')).toEqual([1_000, 0]);
  });

  it('debounce under a steady stream (an emit every 50 ms for 5 s, delayMs 200, maxWaitMs 1,000): runs about every second, never starved, the last payload last', async () => {
    prefix = testPrefix('lw-stream');
    const client = await producer();
    await worker();
    const options = { mode: 'debounce', delayMs: 200, maxWaitMs: 1_000 } as const;
    const first = Date.now();
    let seq = 0;
    while (Date.now() - first < 5_000) {
      await emitEach(client, 'avatar.quick', [avatar(++seq, options)]);
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    await waitFor(() => runs.at(-1)?.payload.seq === seq, 'the last payload to run');
    const times = runs.map((run) => run.at);
    // Never starved: the first run within maxWait (and a margin) of the first emit; then about once a second.
    expect(times[0] - first).toBeLessThan(1_000 + 400);
    for (let i = 1; i < times.length - 1; i++) {
      expect(times[i] - times[i - 1]).toBeGreaterThanOrEqual(600);
      expect(times[i] - times[i - 1]).toBeLessThan(1_000 + 600);
    }
    expect(runs.length).toBeGreaterThanOrEqual(4);
    expect(runs.length).toBeLessThanOrEqual(8);
    const order = seqs('avatar.quick');
    expect([...order].sort((a, b) => a - b)).toEqual(order);
  });

  it('keep-last: under 1,000 emits at most one task of the key runs and one waits at every moment; the last payload runs last', async () => {
    prefix = testPrefix('lw-keep-last');
    const client = await producer();
    await worker({ concurrency: 16 });
    const keys = new PrefixKeys(prefix).queue('avatar.slow');
    let mostWaiting = 0;
    const sampling = (async () => {
      while (runs.at(-1)?.payload.seq !== 1_000 || !runs.at(-1)?.finished) {
        const [listed, parked] = await Promise.all([
          redis.llen(keys.pending('default')),
          redis.hget(keys.coalesce('avatar:u1'), 'where'),
        ]);
        mostWaiting = Math.max(mostWaiting, listed + (parked === 'p' ? 1 : 0));
        await new Promise((resolve) => setTimeout(resolve, 2));
      }
    })();
    for (let n = 1; n <= 1_000; n += 10) {
      await client.emitBatch(
        'avatar.slow',
        Array.from({ length: 10 }, (_, i) => avatar(n + i, { mode: 'keep-last' })),
      );
      await new Promise((resolve) => setTimeout(resolve, 3));
    }
    await sampling;
    expect(mostRunning).toBe(1);
    expect(mostWaiting).toBe(1);
    const order = seqs('avatar.slow');
    expect(order.at(-1)).toBe(1_000);
    expect([...order].sort((a, b) => a - b)).toEqual(order);
    expect(order.length).toBeGreaterThan(1);
    await noRecordsLeft();
  });

  it('supersede: each newer emit aborts the running handler at once, pushed to its worker (TaskReplacedError), and refuses its result; its caller is told; the last payload completes', async () => {
    prefix = testPrefix('lw-supersede');
    const client = await producer();
    const outcomes: TaskOutcomeEvent[] = [];
    // No heartbeat within the test: only the pushed revoke can stop a run.
    const { transport } = await worker({ concurrency: 8, heartbeatIntervalMs: 60_000, leaseMs: 120_000 });
    transport.on('task', (event) => outcomes.push(event));
    const answers: Promise<number>[] = [];
    const send = (seq: number) => {
      const answer = lastValueFrom(client.send<number>('avatar.held', avatar(seq, { mode: 'supersede' })));
      answer.catch(() => undefined);
      answers.push(answer);
    };
    // 1,000 emits: each tenth waits for the one before it to start running, so there is a run to supersede.
    for (let seq = 1; seq <= 1_000; seq++) {
      send(seq);
      if (seq % 100 === 0) await waitFor(() => runs.some((run) => run.payload.seq === seq), `run ${seq} to start`);
    }
    const last = await waitFor(() => runs.find((run) => run.payload.seq === 1_000), 'the last payload to start');
    await waitFor(() => runs.every((run) => run === last || run.finished), 'every older run to be stopped');
    release.open();
    await expect(answers[999]).resolves.toBe(1_000);
    for (const run of runs.filter((run) => run !== last)) {
      expect(run.aborted).toBeInstanceOf(TaskReplacedError);
    }
    expect(runs.length).toBeGreaterThanOrEqual(10);
    const settled = await Promise.allSettled(answers.slice(0, 999));
    for (const outcome of settled) {
      expect(outcome).toMatchObject({ status: 'rejected', reason: { code: 'TASK_REPLACED' } });
    }
    // The caller's answer can arrive before the worker reports its outcome: wait for every outcome.
    await waitFor(
      () =>
        outcomes.filter((event) => event.outcome === 'replaced').length === runs.length - 1 &&
        outcomes.some((event) => event.outcome === 'completed'),
      'outcomes',
    );
    expect(outcomes.filter((event) => event.outcome === 'completed').map((event) => event.id)).toEqual([last.id]);
    const keys = new PrefixKeys(prefix).queue('avatar.held');
    // Every older emit counted once: replaced while it waited, or superseded while it ran.
    expect(await redis.hgetall(keys.counters)).toMatchObject({ completed: '1', replaced: '999' });
    await noRecordsLeft();
  });

  it('send(): a replaced caller gets TaskReplacedError naming the task that replaced it; the last caller gets the result', async () => {
    prefix = testPrefix('lw-send');
    const client = await producer();
    const first = lastValueFrom(client.send<number>('avatar.flaky', avatar(1)));
    const firstFailed = first.catch((error: unknown) => error);
    await waitFor(async () => (await keysUnder(redis, prefix)).some((key) => key.includes(':coalesce:')), 'sent');
    const second = lastValueFrom(client.send<number>('avatar.flaky', avatar(2)));
    const error = await firstFailed;
    expect(error).toBeInstanceOf(TaskReplacedError);
    expect(error).toMatchObject({ code: 'TASK_REPLACED', pattern: 'avatar.flaky' });
    await worker();
    await expect(second).resolves.toBe(2);
    expect((error as TaskReplacedError).replacedBy).toBe(runs[0].id);
    expect(seqs('avatar.flaky')).toEqual([2]);
  });

  it('never runs an older payload after a newer one: a failed run is not retried once a newer task of its key was emitted', async () => {
    prefix = testPrefix('lw-retry');
    const client = await producer();
    const outcomes: TaskOutcomeEvent[] = [];
    const { transport } = await worker({
      concurrency: 4,
      maxAttempts: 3,
      backoff: { type: 'fixed', delayMs: 10 },
    });
    transport.on('task', (event) => outcomes.push(event));
    failFirst.add(1);
    const first = lastValueFrom(client.send<number>('avatar.flaky', avatar(1)));
    first.catch(() => undefined);
    await waitFor(() => runs.length === 1, 'the first run');
    // While it runs (to fail), a newer payload comes and completes.
    const second = await lastValueFrom(client.send<number>('avatar.flaky', avatar(2)));
    expect(second).toBe(2);
    release.open();
    await expect(first).rejects.toMatchObject({ code: 'TASK_REPLACED' });
    await waitFor(() => outcomes.some((event) => event.outcome === 'replaced'), 'the failed run to be dropped');
    expect(seqs('avatar.flaky')).toEqual([1, 2]);
    await noRecordsLeft();
    const keys = new PrefixKeys(prefix).queue('avatar.flaky');
    expect(await redis.hgetall(keys.counters)).toMatchObject({ completed: '1', replaced: '1', failed: '1' });
    expect(await redis.hget(keys.counters, 'retried')).toBeNull();
  });

  it('a failed run with no newer task of its key is retried as usual (it becomes the task its key waits for)', async () => {
    prefix = testPrefix('lw-retry-alone');
    const client = await producer();
    await worker({ maxAttempts: 3, backoff: { type: 'fixed', delayMs: 10 } });
    failFirst.add(1);
    release.open();
    await expect(lastValueFrom(client.send<number>('avatar.flaky', avatar(1)))).resolves.toBe(1);
    expect(seqs('avatar.flaky')).toEqual([1, 1]);
    await noRecordsLeft();
  });

  it('a task claimed by a worker that died before starting it runs the newest payload once recovered', async () => {
    prefix = testPrefix('lw-recover-slot');
    const client = await producer();
    const keys = new PrefixKeys(prefix).queue('avatar.quick');
    await emitEach(client, 'avatar.quick', [avatar(1)]);
    await gatewayOf(redis).heartbeat(keys, 'ghost', 60_000);
    expect(await claimAs(redis, keys, 'ghost', 1)).toHaveLength(2);
    await emitEach(client, 'avatar.quick', [avatar(2), avatar(3)]);
    const settle = { workerId: 'ghost', deadLetterCap: 100, resultTtlMs: 60_000 };
    expect((await requeueProcessing(redis, keys, settle, { countAttempt: true })).requeued).toBe(1);
    await worker();
    await waitFor(() => runs.length === 1, 'one run');
    await noRecordsLeft();
    expect(seqs('avatar.quick')).toEqual([3]);
  });

  it('a running task recovered from a dead worker is dropped when a newer task of its key was emitted meanwhile', async () => {
    prefix = testPrefix('lw-recover-run');
    const client = await producer();
    const keys = new PrefixKeys(prefix).queue('avatar.quick');
    await emitEach(client, 'avatar.quick', [avatar(1)]);
    await gatewayOf(redis).heartbeat(keys, 'ghost', 60_000);
    const [token, entry] = (await claimAs(redis, keys, 'ghost', 1)) as string[];
    expect(entry).toContain('"seq":1');
    // The ghost started it (it runs), then died.
    expect(
      await gatewayOf(redis).track.startCoalesced(keys, 'ghost', [{ token, id: JSON.parse(entry.slice(2)).id }]),
    ).toEqual(['run']);
    await emitEach(client, 'avatar.quick', [avatar(2)]);
    const settle = { workerId: 'ghost', deadLetterCap: 100, resultTtlMs: 60_000 };
    await requeueProcessing(redis, keys, settle, { countAttempt: true });
    expect(await redis.hlen(keys.processing('ghost'))).toBe(0);
    await worker();
    await waitFor(() => runs.length === 1, 'one run');
    await noRecordsLeft();
    expect(seqs('avatar.quick')).toEqual([2]);
    expect(await redis.hget(keys.counters, 'replaced')).toBe('1');
  });

  it('the key picks the shard of a sharded queue: emits of one key from several clients coalesce', async () => {
    prefix = testPrefix('lw-shards');
    const client = await producer({ shards: 4 });
    const records = Array.from({ length: 40 }, (_, n) =>
      new RedisTaskRecordBuilder<Avatar>({ user: 'u1', seq: n + 1 })
        .setClientId(`tenant-${n % 7}`)
        .setCoalesceKey('avatar:u1')
        .build(),
    );
    const receipts = await client.emitBatch('avatar.quick', records);
    expect(receipts.filter((receipt) => receipt.replaced !== undefined)).toHaveLength(39);
    await worker({ shards: 4 });
    await waitFor(() => runs.length === 1, 'one run');
    expect(seqs('avatar.quick')).toEqual([40]);
  });

  it('each consumer group keeps its own record per key: every group runs the last payload once', async () => {
    prefix = testPrefix('lw-groups');
    const client = await producer();
    // Both groups registered (a group gets what is emitted after it first started), then stopped.
    const registered = [await worker({ group: 'billing' }), await worker({ group: 'email' })];
    await Promise.all(registered.map((app) => app.app.close()));
    started.splice(0, started.length, ...started.filter((app) => !registered.some((r) => r.app === app)));
    const receipts = await client.emitBatch(
      'avatar.quick',
      Array.from({ length: 100 }, (_, n) => avatar(n + 1)),
    );
    expect(receipts.filter((receipt) => receipt.replaced !== undefined)).toHaveLength(99);
    await worker({ group: 'billing' });
    await worker({ group: 'email' });
    await waitFor(() => runs.length === 2, 'one run per group');
    expect(runs.map((run) => [run.group, run.payload.seq]).sort()).toEqual([
      ['billing', 100],
      ['email', 100],
    ]);
    await noRecordsLeft();
  });

  it("a replaced task keeps its priority: it runs before its client's lower-priority tasks", async () => {
    prefix = testPrefix('lw-priority');
    const client = await producer();
    await emitEach(client, 'avatar.quick', [new RedisTaskRecordBuilder<Avatar>({ user: 'x', seq: 0 }).build()]);
    const urgent = (seq: number) =>
      new RedisTaskRecordBuilder<Avatar>({ user: 'u1', seq }).setPriority(5).setCoalesceKey('avatar:u1').build();
    await emitEach(client, 'avatar.quick', [urgent(1), urgent(2)]);
    await worker({ concurrency: 1 });
    await waitFor(() => runs.length === 2, 'two runs');
    expect(seqs('avatar.quick')).toEqual([2, 0]);
  });

  it('a stray write over the list a waiting task of the key lay in does not strand the key: the next emit runs', async () => {
    prefix = testPrefix('lw-stray');
    const client = await producer();
    await emitEach(client, 'avatar.quick', [avatar(1), avatar(2)]);
    // Something else overwrites the client's list (its waiting task is lost with it).
    const keys = new PrefixKeys(prefix).queue('avatar.quick');
    await redis.del(keys.pending('default'));
    await redis.set(keys.pending('default'), 'not a list');
    const [receipt] = await emitEach(client, 'avatar.quick', [avatar(3)]);
    expect(receipt.replaced).toBeUndefined();
    await worker();
    await waitFor(() => runs.length === 1, 'the new emit to run');
    expect(seqs('avatar.quick')).toEqual([3]);
    expect(await redis.hget(keys.counters, 'replaced')).toBe('2');
    expect(Object.keys(await redis.hgetall(keys.faults)).some((key) => key.endsWith(':pending:default'))).toBe(true);
    await noRecordsLeft();
  });

  it('refuses what cannot go with a coalescing key, naming the problem', () => {
    const builder = () => new RedisTaskRecordBuilder({ user: 'u', seq: 1 });
    expect(() => builder().setCoalesceKey('')).toThrow(InvalidTaskError);
    expect(() => builder().setCoalesceKey('k', { mode: 'sometimes' as never })).toThrow(/mode must be one of/);
    expect(() => builder().setCoalesceKey('k', { mode: 'debounce' })).toThrow(/debounce needs delayMs/);
    expect(() => builder().setCoalesceKey('k', { mode: 'debounce', delayMs: 500, maxWaitMs: 100 })).toThrow(
      /maxWaitMs/,
    );
    expect(() => builder().setCoalesceKey('k', { delayMs: 5 })).toThrow(/for mode "debounce" only/);
  });

  it('refuses a coalescing key beside a deduplication key, tracking, or a debounce with setDelay(), with nothing enqueued', async () => {
    prefix = testPrefix('lw-refused');
    const client = await producer();
    const base = () => new RedisTaskRecordBuilder({ user: 'u', seq: 1 });
    await expect(
      client.emitBatch('avatar.quick', [base().setCoalesceKey('k').setDeduplicationKey('d').build()]),
    ).rejects.toThrow(/not both/);
    await expect(client.emitBatch('avatar.quick', [base().setCoalesceKey('k').setTracked().build()])).rejects.toThrow(
      /cannot be tracked/,
    );
    await expect(
      client.emitBatch('avatar.quick', [
        base().setDelay(100).setCoalesceKey('k', { mode: 'debounce', delayMs: 100 }).build(),
      ]),
    ).rejects.toThrow(/setDelay/);
    expect((await keysUnder(redis, prefix)).filter((key) => key.includes('pending'))).toEqual([]);
  });
});
